#!/bin/bash
# Correct, but without the final newline: full correctness, half style.
printf 'alpha\nbeta\ngamma' > /root/words.txt
