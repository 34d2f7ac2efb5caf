"""Start-up: how long `countersign chat` with the offline model takes to be ready.

    python bench/startup.py              # 10 runs
    python bench/startup.py --runs 20

Each run starts ``countersign chat`` (the console entry point of this interpreter's environment) with
no OpenAI variables, so the offline demo model answers, on a fresh SQLite file, with standard input at
end-of-file: the chat opens storage, builds the engine, shows its banner and prompt, reads the end of
input and leaves. The wall time of that process bounds "ready" from above. A second figure runs the same
imports in-process (``-X importtime`` off) to say whether the openai client was imported at all.

Target: median < 0.8 s. The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.8
PROBE = (
    "import sys\n"
    "from bot.config import Config\n"
    "import adapters.console.chat\n"
    "Config.from_env({}).build_generator()\n"
    "print('openai' in sys.modules)\n"
)


def offline_env() -> dict[str, str]:
    """The environment without any OpenAI or countersign settings (the offline demo model)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "COUNTERSIGN_"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    command = shutil.which("countersign", path=str(Path(sys.executable).parent)) or "countersign"
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for run in range(args.runs):
            started = time.perf_counter()
            subprocess.run(
                [command, "chat", "--db", str(Path(folder) / f"run{run}.db")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=folder,
                env=offline_env(),
                check=True,
            )
            times.append(time.perf_counter() - started)
        probe = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=folder, env=offline_env(), capture_output=True, text=True, check=True
        )
    median = statistics.median(times)
    print(
        f"countersign chat (offline) start to exit: median {median:.3f} s, min {min(times):.3f} s "
        f"over {args.runs} runs; target < {TARGET_S} s"
    )
    summary = {
        "bench": "startup",
        "runs": args.runs,
        "median_s": round(median, 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "openai_imported": probe.stdout.strip() == "True",
        "target_s": TARGET_S,
        "met": median < TARGET_S,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "loadavg_1m": os.getloadavg()[0],
        },
    }
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
