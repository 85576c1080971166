"""Pure rules of the callback intake."""
