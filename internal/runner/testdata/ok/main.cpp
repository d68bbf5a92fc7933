#include <iostream>
#include <string>
int main() { std::string s = "OK"; std::cout << s << std::endl; }
