program main
    print "(A)", "OK"
end program main
