"""Orders' writes: checkout (with its idempotency key), the saga's transitions, the storefront."""
