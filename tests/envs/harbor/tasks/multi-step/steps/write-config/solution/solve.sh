#!/bin/bash
printf '[core]\nname = demo\n' > /srv/project/app.ini
