import std.stdio;

void main() {
    writeln("OK");
}
