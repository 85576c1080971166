"""Checks of the Helm chart: lint, render and validate it for a matrix of value sets; upgrades
from earlier charts keep hooks and ordinary objects apart."""
