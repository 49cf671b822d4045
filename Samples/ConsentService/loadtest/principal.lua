-- The service's own cost per request: an authenticated endpoint that reads nothing of the
-- ledger (GET /v1/principal), with the same tokens as status.lua, so that status's rate can be
-- compared with it in the same run.
package.path = "Samples/ConsentService/loadtest/?.lua;" .. package.path

require("common").install("principal", function(k, tokens)
    local subject = string.format("t%d-s%d", id, k % 50)
    return wrk.format("GET", "/v1/principal", { ["Authorization"] = "Bearer " .. tokens[subject] })
end)
