#include <stdio.h>
#include <math.h>
int main(void) { printf("%s\n", sqrt(4.0) == 2.0 ? "OK" : "bad"); return 0; }
