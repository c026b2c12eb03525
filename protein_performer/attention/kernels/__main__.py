"""``python -m protein_performer.attention.kernels [--build]``: the fused CPU kernel's set-up
(``fused_cpu.main``), without runpy's warning that ``-m ...kernels.fused_cpu`` gives (the
package imports that module before running it as ``__main__``)."""

import sys

from protein_performer.attention.kernels.fused_cpu import main

if __name__ == "__main__":
    sys.exit(main())
