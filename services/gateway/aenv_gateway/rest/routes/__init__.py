"""Control-plane routes of the HTTP edge."""
