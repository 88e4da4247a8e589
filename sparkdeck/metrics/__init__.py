"""Engine metrics: scrape (reader), check (exposition), remember (history), normalise
(snapshot), loop (sampler) and words (text). Engine-specific names live in the engine
modules as `MetricsMap`s (mapping)."""
