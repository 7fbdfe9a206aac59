import sys

sys.path.insert(0, "/app")

from fib import fib


def test_first_numbers() -> None:
    assert [fib(n) for n in range(10)] == [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]


def test_a_large_one() -> None:
    assert fib(90) == 2880067194370816120
