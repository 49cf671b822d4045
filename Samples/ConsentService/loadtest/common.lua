-- Shared by activate.lua and status.lua: subject tokens, per-thread ids, and a summary line
-- that scripts/load-test.sh parses. Run wrk with one connection per thread (-tN -cN), so each
-- thread's requests are sent one after another.
--
-- common.install(label, make_request) defines wrk's setup/init/request/response/done globals;
-- make_request(k, tokens) builds the thread's k-th request (k = 0, 1, ...).
local M = {}
local threads = {}

local function load_tokens(path)
    local tokens = {}
    for line in io.lines(path) do
        local subject, token = line:match("^(%S+) (%S+)$")
        if subject then tokens[subject] = token end
    end
    return tokens
end

function M.install(label, make_request)
    local tokens, counter = nil, 0
    acked = 0

    function setup(thread)
        thread:set("id", #threads)
        table.insert(threads, thread)
    end

    function init(args)
        tokens = load_tokens(args[1])
    end

    function request()
        local k = counter
        counter = counter + 1
        return make_request(k, tokens)
    end

    function response(status)
        if status == 200 then acked = acked + 1 end
    end

    function done(summary, latency)
        local total = 0
        for _, thread in ipairs(threads) do total = total + (thread:get("acked") or 0) end
        local errors = summary.errors
        io.write(string.format(
            'RESULT {"test":"%s","requests":%d,"seconds":%.3f,"rps":%.1f,"p50_ms":%.2f,"p90_ms":%.2f,"p99_ms":%.2f,"max_ms":%.2f,"non2xx":%d,"socket_errors":%d,"acked":%d}\n',
            label, summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
            latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
            errors.status, errors.connect + errors.read + errors.write + errors.timeout, total))
    end
end

return M
