// What `make bench` writes besides its table: a description of the machine, and an SVG plot of
// time per operation against ledger size on log axes, where a per-subject path must be a flat
// line and a whole-ledger path a line of slope one.

#if canImport(Glibc)
import Glibc
#endif

/// Cores, CPU model and the filesystem that holds `path`, for the record of a run.
func machineDescription(path: String) -> String {
    var model = "unknown CPU"
    if let cpuinfo = readText("/proc/cpuinfo"),
        let line = cpuinfo.split(separator: "\n").first(where: { $0.hasPrefix("model name") }),
        let colon = line.firstIndex(of: ":")
    {
        model = line[line.index(after: colon)...].trimmingPrefix(" ").description
    }
    // The mount that holds `path`: the longest mount point that is a prefix of it.
    var filesystem = "unknown filesystem"
    if let mounts = readText("/proc/mounts") {
        var best = ""
        for line in mounts.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 3 else { continue }
            let point = String(fields[1])
            let covers = path == point || path.hasPrefix(point == "/" ? "/" : point + "/")
            if covers, point.count >= best.count {
                best = point
                filesystem = "\(fields[2]) on \(fields[0]) mounted at \(point)"
            }
        }
    }
    return "\(cores) cores, \(model), ledgers on \(filesystem)"
}

func readText(_ path: String) -> String? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = fread(&buffer, 1, buffer.count, file)
        if n <= 0 { break }
        bytes += buffer[0..<n]
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Points of the plot: each series' milliseconds per operation at each ledger size.
struct PlotData {
    var series: [(name: String, points: [(size: Int, ms: Double)])] = []

    mutating func add(_ name: String, size: Int, ms: Double) {
        guard ms.isFinite, ms > 0 else { return }
        if let i = series.firstIndex(where: { $0.name == name }) {
            series[i].points.append((size, ms))
        } else {
            series.append((name, [(size, ms)]))
        }
    }

    /// The plot as an SVG document: log-log axes, one coloured line per series, a legend.
    func svg(title: String, subtitle: String) -> String {
        let all = series.flatMap(\.points)
        guard !all.isEmpty else { return "" }
        let (width, height) = (860.0, 520.0)
        let (left, right, top, bottom) = (80.0, 260.0, 50.0, 60.0)
        func decade(_ value: Double, up: Bool) -> Double { up ? ceil(log10(value)) : floor(log10(value)) }
        let x0 = decade(Double(all.map(\.size).min()!), up: false), x1 = max(x0 + 1, decade(Double(all.map(\.size).max()!), up: true))
        let y0 = decade(all.map(\.ms).min()!, up: false), y1 = max(y0 + 1, decade(all.map(\.ms).max()!, up: true))
        func x(_ size: Int) -> Double { left + (log10(Double(size)) - x0) / (x1 - x0) * (width - left - right) }
        func y(_ ms: Double) -> Double { height - bottom - (log10(ms) - y0) / (y1 - y0) * (height - top - bottom) }
        func label(_ exponent: Double, unit: String) -> String {
            let value = pow(10, exponent)
            if unit == "events" { return value >= 1e6 ? "\(Int(value / 1e6))M" : value >= 1e3 ? "\(Int(value / 1e3))k" : "\(Int(value))" }
            return value >= 1000 ? "\(Int(value / 1000)) s" : value >= 1 ? "\(Int(value)) ms" : "\(value) ms"
        }
        let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]
        var svg = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="white"/>
            <text x="\(left)" y="18" font-size="14">\(title)</text>
            <text x="\(left)" y="34" font-size="11" fill="#555">\(subtitle)</text>

            """
        for e in stride(from: x0, through: x1, by: 1) {
            svg += "<line x1=\"\(x(Int(pow(10, e))))\" y1=\"\(top)\" x2=\"\(x(Int(pow(10, e))))\" y2=\"\(height - bottom)\" stroke=\"#ddd\"/>\n"
            svg += "<text x=\"\(x(Int(pow(10, e))))\" y=\"\(height - bottom + 18)\" text-anchor=\"middle\">\(label(e, unit: "events"))</text>\n"
        }
        for e in stride(from: y0, through: y1, by: 1) {
            svg += "<line x1=\"\(left)\" y1=\"\(y(pow(10, e)))\" x2=\"\(width - right)\" y2=\"\(y(pow(10, e)))\" stroke=\"#ddd\"/>\n"
            svg += "<text x=\"\(left - 6)\" y=\"\(y(pow(10, e)) + 4)\" text-anchor=\"end\">\(label(e, unit: "ms"))</text>\n"
        }
        svg += "<text x=\"\((left + width - right) / 2)\" y=\"\(height - 16)\" text-anchor=\"middle\">ledger size (events, log scale)</text>\n"
        svg += "<text transform=\"translate(18 \((top + height - bottom) / 2)) rotate(-90)\" text-anchor=\"middle\">time per operation (log scale)</text>\n"
        for (i, s) in series.enumerated() {
            let colour = colours[i % colours.count]
            let points = s.points.sorted { $0.size < $1.size }.map { "\(x($0.size)),\(y($0.ms))" }
            svg += "<polyline fill=\"none\" stroke=\"\(colour)\" stroke-width=\"2\" points=\"\(points.joined(separator: " "))\"/>\n"
            for p in s.points { svg += "<circle cx=\"\(x(p.size))\" cy=\"\(y(p.ms))\" r=\"3\" fill=\"\(colour)\"/>\n" }
            let ly = top + 16 + Double(i) * 20
            svg += "<line x1=\"\(width - right + 14)\" y1=\"\(ly - 4)\" x2=\"\(width - right + 34)\" y2=\"\(ly - 4)\" stroke=\"\(colour)\" stroke-width=\"2\"/>\n"
            svg += "<text x=\"\(width - right + 40)\" y=\"\(ly)\">\(s.name)</text>\n"
        }
        return svg + "</svg>\n"
    }
}
