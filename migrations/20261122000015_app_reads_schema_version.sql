-- The app role reads the applied migration versions: `serve` refuses to start, and
-- `/readyz` answers 503, while the schema is behind the binary.
GRANT SELECT ON _sqlx_migrations TO channel_bridge_app;
