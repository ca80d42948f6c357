-- POST the same checkout body with a new Idempotency-Key on every request.
-- BENCH_PATH and BENCH_RUN come from the environment; each thread numbers its own keys.
local path = os.getenv("BENCH_PATH") or "/api/checkout/"
local run = os.getenv("BENCH_RUN") or "run"
local body = '{"customer_id":"bench","items":[{"sku":"BENCH","quantity":1}],"payment_token":"tok_visa"}'
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

local counter = 0

function request()
  counter = counter + 1
  local key = run .. "-" .. tostring(tid) .. "-" .. tostring(counter)
  return wrk.format("POST", path, {["Content-Type"] = "application/json", ["Idempotency-Key"] = key}, body)
end
