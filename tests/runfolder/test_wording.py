"""The words a count or a value goes with (runfolder.wording)."""
from __future__ import annotations

import pytest

from runfolder.wording import article, plural


@pytest.mark.parametrize("word, said", [
    ("8s", "an 8s"), ("11s", "an 11s"), ("18s", "an 18s"), ("80s", "an 80s"), ("800ms", "an 800ms"),
    ("11000s", "an 11000s"), ("20s", "a 20s"), ("1s", "a 1s"), ("1.5s", "a 1.5s"), ("110s", "a 110s"),
    ("180s", "a 180s"), ("error", "an error"), ("link", "a link"),
])
def test_article_goes_by_the_sound(word, said):
    assert article(word) == said


def test_plural():
    assert [plural(n, "item") for n in (0, 1, 2)] == ["0 items", "1 item", "2 items"]
