"""What every service runs besides its context: the settings every service shares (``settings``), the web
tier (URLs, middleware, error answers, health, metrics, tracing, logging, the admin's login lockout),
gunicorn's configuration and ``prepare_deployment``. It imports no context; a service's tree ships it whole
(``make service``), the monolith's composition root (``config/``) builds on it."""
