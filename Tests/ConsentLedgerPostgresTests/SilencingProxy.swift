import Foundation
#if PostgreSQL
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on the loopback interface in front of the test server, which can make the
/// connections it carries go silent: from ``silenceOpenConnections()`` on, what either side
/// sends on them is read and dropped, and their sockets stay open. Connections made after that
/// are carried as before. It is how a pooled connection that takes a statement and never
/// answers it (its backend gone while it sat idle) is made on purpose.
final class SilencingProxy: @unchecked Sendable {
    /// The port it listens on, on 127.0.0.1.
    let port: Int
    private let listener: Int32
    private let target: (host: String, port: Int)
    private let state = Mutex<(pairs: [Pair], stopped: Bool)>(([], false))

    private final class Pair: Sendable {
        let client: Int32
        let server: Int32
        let silent = Atomic<Bool>(false)
        let closed = Atomic<Bool>(false)
        init(client: Int32, server: Int32) {
            self.client = client
            self.server = server
        }
    }

    init(toHost host: String, port targetPort: Int) throws {
        target = (host, targetPort)
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(listener, 64) == 0 else { throw ProxyError(message: "cannot listen: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        self.port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [self] in acceptLoop() }.start()
    }

    struct ProxyError: Error { let message: String }

    /// Makes every connection open now silent.
    func silenceOpenConnections() {
        state.withLock { state in state.pairs.forEach { $0.silent.store(true, ordering: .sequentiallyConsistent) } }
    }

    /// How many connections it has carried.
    var connectionCount: Int { state.withLock { $0.pairs.count } }

    /// Stops listening and closes every connection.
    func stop() {
        let pairs = state.withLock { state -> [Pair] in
            state.stopped = true
            return state.pairs
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for pair in pairs {
            pair.closed.store(true, ordering: .sequentiallyConsistent)
            shutdown(pair.client, Int32(SHUT_RDWR))
            shutdown(pair.server, Int32(SHUT_RDWR))
        }
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                close(listener)
                return
            }
            guard let server = connectToTarget() else {
                close(client)
                continue
            }
            let pair = Pair(client: client, server: server)
            let stopped = state.withLock { state -> Bool in
                if !state.stopped { state.pairs.append(pair) }
                return state.stopped
            }
            if stopped {
                close(client)
                close(server)
                return
            }
            Thread { Self.carry(pair) }.start()
        }
    }

    private func connectToTarget() -> Int32? {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(target.host == "localhost" ? "127.0.0.1" : target.host)
        address.sin_port = UInt16(target.port).bigEndian
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else {
            close(server)
            return nil
        }
        return server
    }

    /// Copies bytes both ways until either side closes, or drops them once the pair is silent.
    private static func carry(_ pair: Pair) {
        defer {
            close(pair.client)
            close(pair.server)
        }
        var buffer = [UInt8](repeating: 0, count: 65536)
        var fds = [pollfd(fd: pair.client, events: Int16(POLLIN), revents: 0), pollfd(fd: pair.server, events: Int16(POLLIN), revents: 0)]
        while !pair.closed.load(ordering: .sequentiallyConsistent) {
            guard poll(&fds, 2, 200) >= 0 || errno == EINTR else { return }
            for (i, fd) in fds.enumerated() where fd.revents != 0 {
                let count = buffer.withUnsafeMutableBytes { read(fd.fd, $0.baseAddress, $0.count) }
                if count <= 0 { return }
                if pair.silent.load(ordering: .sequentiallyConsistent) { continue }
                let to = i == 0 ? pair.server : pair.client
                var sent = 0
                while sent < count {
                    let n = buffer.withUnsafeBytes { write(to, $0.baseAddress! + sent, count - sent) }
                    if n <= 0 { return }
                    sent += n
                }
            }
        }
    }
}
#endif
