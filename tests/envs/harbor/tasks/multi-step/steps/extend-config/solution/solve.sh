#!/bin/bash
printf '[extra]\nlevel = 2\n' >> /srv/project/app.ini
