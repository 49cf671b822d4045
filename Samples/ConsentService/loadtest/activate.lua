-- Durable writes: each thread owns 50 subjects and, for each in turn, activates Timeline's
-- required + optional-a consents, then withdraws required (which cascades). Every answered
-- request therefore appended exactly two events, so after the run the ledger must hold
-- 1 + 2 x (answered writes) events, plus at most two per connection for requests that were in
-- flight when wrk stopped.
package.path = "Samples/ConsentService/loadtest/?.lua;" .. package.path

require("common").install("activate", function(k, tokens)
    local subject = string.format("t%d-s%d", id, math.floor(k / 2) % 50)
    local headers = { ["Authorization"] = "Bearer " .. tokens[subject], ["Content-Type"] = "application/json" }
    if k % 2 == 0 then
        return wrk.format("POST", "/v1/subjects/" .. subject .. "/features/timeline/activate", headers, '{"consents":["required","optional-a"]}')
    end
    return wrk.format("POST", "/v1/subjects/" .. subject .. "/features/timeline/revoke", headers, '{"consent":"required"}')
end)
