"""Object stores snapstore can keep its data in."""
