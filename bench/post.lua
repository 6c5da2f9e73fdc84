-- wrk script: POSTs pre-signed notification bodies, each exactly once.
--
-- Environment: BENCH_BODIES (file, one body a line), BENCH_WRK_THREADS (= wrk -t),
-- BENCH_PATH (endpoint path), BENCH_DONE_DIR (a marker file per finished thread goes there).
-- Thread k of n takes lines k, k+n, k+2n, ... (disjoint slices). When its slice is exhausted a
-- connection goes idle (delay() of an hour) instead of sending anything else; when every request
-- of the slice has been answered, the thread writes its marker and stops. bench.py interrupts wrk
-- (SIGINT) once all markers exist, so wrk's latency histogram holds only real requests. A request
-- whose connection fails gets no response() call; so once every slice is sent and the table
-- stops growing for 3 s, bench.py interrupts wrk as well (the lost answers show as socket errors).
-- Per-thread counts of answers (accepted / duplicate / other 200 / each non-200 status) and the
-- monotonic times of the first send and the last answer are printed by done() as one JSON line
-- prefixed "BENCH_JSON ".
-- BENCH_RATE (requests/s over all threads; unset or 0: as fast as the connections go) paces each
-- thread on a fixed schedule: request i of a thread is due at start + i * threads / rate (wrk's
-- delay() has 1 ms steps; a late request goes at once and the schedule does not slip). wrk times
-- each request from its send, in C: the latency mode's light client (no interpreter on the
-- shared cores between the server and its answers).

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk_id, bench_timespec *tp);
]]
local ts = ffi.new("bench_timespec")
local function now()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC: one clock for all threads
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

-- Main state: remember the threads for done().
local threads = {}
local next_id = 0
function setup(thread)
    thread:set("tid", next_id)
    next_id = next_id + 1
    table.insert(threads, thread)
end

-- Thread states.
bodies = {}
count = 0
idx = 0
sent = 0
interval = 0
next_at = 0
late = 0
late_max_ms = 0
recv = 0
counts = {}
first_send = 0
last_recv = 0
finished = false
local headers = { ["Content-Type"] = "application/json" }
local path = os.getenv("BENCH_PATH") or "/apple/notifications"

-- A marker file for bench.py: "sent-<tid>" when the slice is all sent, "thread-<tid>" when all
-- of it is answered.
function mark(prefix)
    local dir = os.getenv("BENCH_DONE_DIR")
    if dir then
        local f = io.open(dir .. "/" .. prefix .. tid, "w")
        if f then f:write(tostring(recv)); f:close() end
    end
end

function init(args)
    local nthreads = tonumber(os.getenv("BENCH_WRK_THREADS") or "1")
    local rate = tonumber(os.getenv("BENCH_RATE") or "0")
    if rate > 0 then interval = nthreads / rate end
    local file = assert(os.getenv("BENCH_BODIES"), "BENCH_BODIES not set")
    local line = 0
    for body in io.lines(file) do
        if body ~= "" then
            if line % nthreads == tid then
                count = count + 1
                bodies[count] = body
            end
            line = line + 1
        end
    end
end

function request()
    idx = idx + 1
    local body = bodies[idx]
    if body == nil then
        -- Only when a slice is smaller than its connections (bench.py prevents this):
        -- resend the last body, which the server answers "duplicate".
        body = bodies[count]
    end
    sent = sent + 1
    if first_send == 0 then first_send = now() end
    if sent == count then mark("sent-") end
    return wrk.format("POST", path, headers, body)
end

function delay()
    if idx >= count then return 3600000 end
    if interval == 0 then return 0 end
    local t = now()
    if next_at == 0 then next_at = t end
    next_at = next_at + interval
    local wait = (next_at - t) * 1000
    if wait < 0 then
        -- Behind schedule (every connection busy, or this thread descheduled): sent at once;
        -- counted, so a result that hides a slipping client says so.
        late = late + 1
        if -wait > late_max_ms then late_max_ms = -wait end
        return 0
    end
    return wait
end

function response(status, hdrs, body)
    recv = recv + 1
    last_recv = now()
    local k
    if status == 200 then
        if body:find('"accepted"', 1, true) then
            k = "accepted"
        elseif body:find('"duplicate"', 1, true) then
            k = "duplicate"
        else
            k = "ok_other"
        end
    else
        k = tostring(status)
    end
    counts[k] = (counts[k] or 0) + 1
    if recv >= count and not finished then
        finished = true
        mark("thread-")
        wrk.thread:stop()
    end
end

local function esc(s) return '"' .. tostring(s):gsub('[%c"\\]', '') .. '"' end

function done(summary, latency, requests)
    local total = {}
    local first, last, nsent, nrecv, nbodies, nlate, late_max = nil, 0, 0, 0, 0, 0, 0
    for _, t in ipairs(threads) do
        local c = t:get("counts") or {}
        for k, v in pairs(c) do total[k] = (total[k] or 0) + v end
        local f, l = t:get("first_send"), t:get("last_recv")
        if f and f > 0 and (first == nil or f < first) then first = f end
        if l and l > last then last = l end
        nsent = nsent + (t:get("sent") or 0)
        nrecv = nrecv + (t:get("recv") or 0)
        nbodies = nbodies + (t:get("count") or 0)
        nlate = nlate + (t:get("late") or 0)
        local m = t:get("late_max_ms") or 0
        if m > late_max then late_max = m end
    end
    local parts = {}
    for k, v in pairs(total) do table.insert(parts, esc(k) .. ":" .. v) end
    local pcts = {}
    for _, p in ipairs({ 50, 75, 90, 99, 99.9 }) do
        table.insert(pcts, esc(p) .. ":" .. latency:percentile(p))
    end
    local e = summary.errors
    io.write("BENCH_JSON {",
        '"counts":{', table.concat(parts, ","), "},",
        '"sent":', nsent, ',"received":', nrecv, ',"bodies":', nbodies, ",",
        '"late":', nlate, ',"late_max_ms":', string.format("%.3f", late_max), ",",
        '"first_send":', string.format("%.6f", first or 0), ',"last_recv":', string.format("%.6f", last), ",",
        '"wrk_requests":', summary.requests, ',"wrk_duration_us":', summary.duration, ",",
        '"errors":{"connect":', e.connect, ',"read":', e.read, ',"write":', e.write,
        ',"status":', e.status, ',"timeout":', e.timeout, "},",
        '"latency_us":{"min":', latency.min, ',"max":', latency.max, ',"mean":', string.format("%.1f", latency.mean),
        ',"stdev":', string.format("%.1f", latency.stdev), ',"percentiles":{', table.concat(pcts, ","), "}}",
        "}\n")
end
