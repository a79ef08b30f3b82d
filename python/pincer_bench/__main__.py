"""The ``pincer`` command, from the binary this package carries."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    """Replaces this process with the bundled ``pincer`` binary, arguments unchanged."""
    binary = Path(__file__).resolve().parent / "bin" / "pincer"
    if not binary.is_file():
        sys.exit(
            f"pincer-bench: this build carries no pincer binary ({binary} is missing); "
            "build the wheel with ./run.sh wheel"
        )
    os.execv(binary, [str(binary), *sys.argv[1:]])


if __name__ == "__main__":
    main()
