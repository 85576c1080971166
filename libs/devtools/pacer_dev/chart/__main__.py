"""``python -m pacer_dev.chart``: the chart checks, one line per value set (``make chart``)."""

import sys

from pacer_dev.chart.check import main

sys.exit(main())
