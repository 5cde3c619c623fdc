"""Counts the pixels of given RGB colours in a PNG (is a plot drawn, or is the page blank?).

usage: pixels.py FILE.png R,G,B [R,G,B ...]   (prints one count per colour)"""
import sys

from PIL import Image

img = Image.open(sys.argv[1]).convert("RGB")
counts = {tuple(int(x) for x in c.split(",")): 0 for c in sys.argv[2:]}
for px in img.getdata():
    if px in counts:
        counts[px] += 1
print(" ".join(str(counts[c]) for c in counts))
