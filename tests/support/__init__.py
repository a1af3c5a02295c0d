"""What the tests share: stand-in forges and a git server, payloads, processes, and the helpers of the
receiver, worker and chaos tests. Only tests and benchmarks import it; no test imports another test."""
