-- wrk script of make bench-http (hack/bench-http.sh): POSTs a body template in which
-- every "@I@" becomes a number per request, and prints one machine-readable line.
--
--   wrk -t1 -c32 -d10s -s hack/benchhttp/workload.lua URL -- BODY MODE OFFSET
--
-- BODY   a template written by `bench-http prepare` (test/cmd/bench-http)
-- MODE   distinct: OFFSET, OFFSET+1, ... (never repeated, so every request is a new pod)
--        arrayjob: 0..999, cycled (the pods of one array job)
-- The substitution is the one `bench-http check` makes when it compares the bridge with
-- the OPA server, so the timed requests are the checked ones.

local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

local pieces, mode, offset, stride, n

function init(args)
  local f = assert(io.open(args[1], "rb"))
  local body = f:read("*a")
  f:close()
  -- Split once; each request is then a table.concat with the number as separator.
  pieces = {}
  local start = 1
  while true do
    local s, e = string.find(body, "@I@", start, true)
    if not s then break end
    table.insert(pieces, string.sub(body, start, s - 1))
    start = e + 1
  end
  table.insert(pieces, string.sub(body, start))
  mode = args[2]
  assert(mode == "distinct" or mode == "arrayjob", "MODE must be distinct or arrayjob")
  offset = tonumber(args[3]) or 0
  -- Threads interleave their numbers: thread k of T makes k, k+T, k+2T, ...
  stride = tonumber(args[4]) or 1
  n = id or 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local i = n
  n = n + stride
  if mode == "distinct" then
    i = offset + i
  else
    i = i % 1000
  end
  return wrk.format(nil, nil, nil, table.concat(pieces, string.format("%d", i)))
end

-- Only the main thread runs done(); errors.status counts non-2xx/3xx answers.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
