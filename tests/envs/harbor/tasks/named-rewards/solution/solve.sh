#!/bin/bash
printf 'alpha\nbeta\ngamma\n' > /root/words.txt
