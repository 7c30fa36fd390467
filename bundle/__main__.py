"""`python -m bundle` is not a command: bundle/ is the format alone. Say which command to use now
(one sentence on stderr, exit status 2), importing nothing else."""

import sys

sys.stderr.write("error: bundle/ is the format, not a command; use `python -m job keygen|archive|cosign` "
                 "(or `calibration-job keygen|archive|cosign`) instead.\n")
raise SystemExit(2)
