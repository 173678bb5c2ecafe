// CLI11's two classes that settings headers name, declared without CLI/CLI.hpp. That header is
// ~15,000 lines of inline definitions; through relayd_config.h and controld_config.h it reached
// almost every file of both daemons, for the sake of one `CLI::App&` parameter each. A file that
// builds or runs an App includes <CLI/CLI.hpp> itself.
#pragma once

namespace CLI {
class App;
class Option;
}  // namespace CLI
