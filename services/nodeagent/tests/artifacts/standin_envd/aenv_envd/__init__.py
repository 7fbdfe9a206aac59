"""Stand-in for envd used by the guest artifact tests: serves GET /health -> 204 on :49983."""
