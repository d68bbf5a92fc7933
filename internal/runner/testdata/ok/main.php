<?php
echo "OK\n";
