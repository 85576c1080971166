"""Checks of the Helm chart: lint, render and validate it for a matrix of value sets."""
