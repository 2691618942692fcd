#!/bin/bash
set -eu
mkdir -p /work/text
cat > /work/text/poem.txt <<'POEM'
The river runs past the mill, and the mill turns slow;
the miller sings to the river in rain and snow.
Rain on the roof, rain on the road, the river grows wide,
and the miller counts sacks of grain by the water's side.
When the river is low, the mill wheel sleeps;
when the rain comes back, the river leaps.
POEM
