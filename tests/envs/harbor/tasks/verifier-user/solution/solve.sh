#!/bin/bash
id -un > /shared/author.txt
