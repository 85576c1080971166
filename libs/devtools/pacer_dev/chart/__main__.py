"""``python -m pacer_dev.chart``: the chart checks, one line per value set, then the upgrades
from earlier charts (``make chart``)."""

import sys

from pacer_dev.chart import check, upgrade

sys.exit(max(check.main(), upgrade.main()))
