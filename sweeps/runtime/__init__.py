"""A sweep under Ray Tune: the driver, the trainables, Tune's settings, the callbacks and the
progress line, and what ``--resume`` needs to continue a killed sweep."""
