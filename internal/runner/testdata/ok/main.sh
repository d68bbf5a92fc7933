echo OK
