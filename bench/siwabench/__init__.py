"""siwa-notify's benchmark: one module per mode (throughput, latency, worker, workers, scale, lag,
forward, burst, compare, transfer, authlib, sigterm) on a shared harness; bench/bench.py runs them."""
