"""Templates: recipes and their steps (fast, over a fake guest) and captures of real ones."""
