cat("OK\n")
