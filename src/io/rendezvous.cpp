// See rendezvous.h.
#include "io/rendezvous.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace megaops {

namespace {

const char* const MAGIC = "megaops-rendezvous/1 ";

std::string header(const std::string& job) {
  return std::string(MAGIC) + job + "\n";
}

}  // namespace

void rendezvous_publish(const std::string& path, const std::string& job, const std::string& blob) {
  if (job.empty() || job.find('\n') != std::string::npos)
    throw Error("rendezvous " + path + ": the job token must be one non-empty line");
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("rendezvous " + path + ": cannot write " + tmp);
    f << header(job);
    f.write(blob.data(), static_cast<std::streamsize>(blob.size()));
    if (!f) throw Error("rendezvous " + path + ": cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("rendezvous " + path + ": cannot rename " + tmp + " to it");
  }
}

std::string rendezvous_wait(const std::string& path, const std::string& job, size_t size,
                            double timeout_s) {
  const std::string want = header(job);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f) {
      std::ostringstream all;
      all << f.rdbuf();
      const std::string text = all.str();
      if (text.size() == want.size() + size && text.compare(0, want.size(), want) == 0)
        return text.substr(want.size());
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s)
      throw Error("rendezvous " + path + ": no blob for job '" + job + "' after " +
                  std::to_string(static_cast<int>(timeout_s)) + " s (is rank 0 running?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace megaops
