-- wrk_done.lua: given to every wrk run of benchmark.sh (`wrk ... -s benchmark/wrk_done.lua`).
--
-- wrk's own summary is written for people: it rounds the bytes ("1.30GB read") and prints times with units
-- and two decimals ("485.89us", "1.54ms"). When the run is over, wrk calls done() with its exact counters;
-- this prints them on one line that analyse.py reads, so that no number is parsed back from rounded text:
--
--   psp-wrk: requests=1200852 bytes=1394189172 duration_us=10003456 connect_errors=0 read_errors=0
--            write_errors=0 timeout_errors=0 status_errors=0 latency_mean_us=485.893 latency_p99_us=1540
--
-- (one line in the output). requests: complete responses; bytes: every byte read, heads included;
-- duration_us: the run's length; the *_errors: wrk's socket errors by kind, and status_errors its
-- "Non-2xx or 3xx responses"; latency_*: the mean and the 99th percentile, in microseconds. wrk's human
-- summary is printed as before, above this line, and stays in the log.

done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    "psp-wrk: requests=%d bytes=%d duration_us=%d connect_errors=%d read_errors=%d write_errors=%d"
      .. " timeout_errors=%d status_errors=%d latency_mean_us=%.3f latency_p99_us=%d\n",
    summary.requests, summary.bytes, summary.duration, errors.connect, errors.read, errors.write,
    errors.timeout, errors.status, latency.mean, latency:percentile(99)))
end
