"""Code shared by every aenv service. Kept small: envd does not import it."""
