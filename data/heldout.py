"""A held-out test set no preset trains on, to check that a model does no
harm where bicubic already does well: photos of other kinds that
scikit-image ships (no download), and synthetic images (flat colours,
smooth gradients, text, hard edges) drawn here, the same bits on every
machine. `srgan samples DIR` writes them to DIR/heldout/{photos,synthetic};
`srgan evaluate` scores them."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

# name -> file in skimage/data: a rocket on a launch pad, a motorcycle, a
# retina scan, a text page (grey, made RGB), and a colour-wheel-like chart.
HELDOUT_PHOTOS = {
    "rocket": "rocket.jpg",
    "motorcycle": "motorcycle_left.png",
    "retina": "retina.jpg",
    "page": "page.png",
    "color": "color.png",
}

SIZE = (256, 192)  # width, height of the synthetic images: a multiple of 8 (every scale)
# Saturated and pastel colours, the ones a model trained on four photos has
# seen least: greens, magentas, cyans.
CHART_COLOURS = [
    (0, 200, 0),
    (230, 0, 230),
    (0, 210, 210),
    (250, 250, 0),
    (30, 30, 220),
    (220, 30, 30),
    (120, 255, 120),
    (255, 150, 255),
    (140, 90, 40),
    (255, 255, 255),
    (128, 128, 128),
    (10, 10, 10),
]


def colour_chart() -> np.ndarray:
    """4 x 3 flat patches of CHART_COLOURS: bicubic is exact inside each."""
    width, height = SIZE
    image = np.zeros((height, width, 3), np.uint8)
    for i, colour in enumerate(CHART_COLOURS):
        row, col = divmod(i, 4)
        image[row * height // 3 : (row + 1) * height // 3, col * width // 4 : (col + 1) * width // 4] = colour
    return image


def smooth_gradients() -> np.ndarray:
    """Red rising left to right, green top to bottom, blue along the
    diagonal, with a slow ripple: smooth everywhere, every colour."""
    width, height = SIZE
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    red = x / (width - 1)
    green = y / (height - 1)
    blue = 0.5 + 0.5 * np.sin(2 * np.pi * (x + y) / (width + height))
    return (np.stack([red, green, blue], axis=-1) * 255).round().astype(np.uint8)


def text_card() -> np.ndarray:
    """Dark and coloured text, two sizes, on light and coloured grounds."""
    width, height = SIZE
    card = Image.new("RGB", SIZE, (245, 245, 240))
    draw = ImageDraw.Draw(card)
    draw.rectangle((0, height // 2, width, height), fill=(20, 60, 140))
    lines = [
        ("SRGAN x4 held-out", (10, 10), (0, 0, 0)),
        ("the quick brown fox", (10, 40), (200, 0, 0)),
        ("jumps over 12345", (10, 70), (0, 120, 0)),
        ("WHITE ON BLUE", (10, 110), (255, 255, 255)),
        ("yellow text 0.5 dB", (10, 150), (255, 230, 0)),
    ]
    for words, where, colour in lines:
        draw.text(where, words, fill=colour, font_size=18 if where[1] < 100 else 22)
    return np.asarray(card)


def hard_edges() -> np.ndarray:
    """Stripes of falling width and a checkerboard: what bicubic blurs."""
    width, height = SIZE
    image = np.full((height, width, 3), 235, np.uint8)
    x = 0
    for stripe in (16, 12, 8, 6, 4, 3, 2):
        for _ in range(2):
            image[: height // 2, x : x + stripe] = (30, 30, 30)
            x += 2 * stripe
    y, x = np.mgrid[0 : height - height // 2, 0:width]
    image[height // 2 :] = np.where(((x // 8 + y // 8) % 2 == 0)[..., None], (200, 40, 160), (40, 200, 60))
    return image


SYNTHETIC = {"chart": colour_chart, "gradients": smooth_gradients, "text": text_card, "edges": hard_edges}


def synthetic_images() -> dict[str, np.ndarray]:
    """name -> HxWx3 uint8."""
    return {name: draw() for name, draw in SYNTHETIC.items()}
