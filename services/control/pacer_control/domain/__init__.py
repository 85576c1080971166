"""Pure rules of the Control API: who may do what, filters, report rows, dry runs."""
