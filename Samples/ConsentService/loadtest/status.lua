-- Reads: each request asks for one subject's current consents (GET .../status).
package.path = "Samples/ConsentService/loadtest/?.lua;" .. package.path

require("common").install("status", function(k, tokens)
    local subject = string.format("t%d-s%d", id, k % 50)
    return wrk.format("GET", "/v1/subjects/" .. subject .. "/status", { ["Authorization"] = "Bearer " .. tokens[subject] })
end)
