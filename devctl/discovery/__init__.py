"""Reading the machine without side effects: no jax import, no backend initialization, nothing written."""
