"""Runs ../shared/baseline/sklearn_baseline.py with its host-speed canary calibrated to this machine.

Usage (by `cargo xtask bench --compare`): python sklearn_calibrated.py <path to sklearn_baseline.py> [its options]

The script keeps a timed repetition only if a canary (DGEMM 1024 and a 64 MiB copy) run before and
after it reaches a fixed fraction of reference rates written for the machine it was first run on
(78 GFLOP/s, 18 GB/s copy). On a machine whose quiet copy rate is below that threshold (an Intel Xeon
here copies at about 13.3 GB/s against the 13.5 GB/s required) every repetition is judged "slow"
and redone after waiting up to 15 minutes, so a full run never ends. This wrapper measures the
canary on this machine while it is quiet (median of 5) and uses those rates as the references; the
rule itself (discard a repetition when the host runs below 80% / 75% of its quiet speed) is
unchanged.
"""
import os
import runpy
import sys

script = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.dirname(script))
import benchutil  # noqa: E402  (the script's own helper module, the same module object it imports)
from threadpoolctl import threadpool_limits  # noqa: E402

threads = 2
if "--threads" in sys.argv:
    threads = int(sys.argv[sys.argv.index("--threads") + 1])
with threadpool_limits(limits=threads):
    benchutil.wait_quiet()
    runs = [benchutil.canary(threads) for _ in range(5)]
gflops = sorted(g for g, _ in runs)[2]
copy = sorted(b for _, b in runs)[2]
print(f"# canary references calibrated on this machine (median of 5 while quiet): "
      f"DGEMM {gflops:.1f} GFLOP/s on {threads} threads (script's reference "
      f"{benchutil.CANARY_REF['dgemm'].get(threads)}), copy {copy:.1f} GB/s (script's reference "
      f"{benchutil.CANARY_REF['copy']})", flush=True)
benchutil.CANARY_REF["dgemm"][threads] = gflops
benchutil.CANARY_REF["copy"] = copy
sys.argv = [script] + sys.argv[2:]
runpy.run_path(script, run_name="__main__")
