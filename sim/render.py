"""``python -m sim.render``: pictures of a digital twin; the program is :mod:`sim.render_cli`.

The name ``sim.render`` is the render function (``import sim; sim.render(cloud, viewmats, Ks, W, H)``,
see :mod:`sim.rendering`); this file exists so that ``python -m sim.render`` runs the program.
Importing it is harmless: the ``sim`` package keeps its ``render`` attribute the function.
"""

from __future__ import annotations

import sys

from sim.render_cli import main

if __name__ == "__main__":
    sys.exit(main())
