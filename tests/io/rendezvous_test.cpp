// The file rendezvous of a tensor-parallel job (io/rendezvous.h): ranks started before rank 0
// publishes get the blob; a previous job's file is not taken; a missing rank 0 is a timeout error
// naming the path and job.
#include "io/rendezvous.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"

namespace megaops {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const char* tag) {
  return (fs::path(::testing::TempDir()) /
          ("megaops-rdv-" + std::string(tag) + "-" + std::to_string(getpid())))
      .string();
}

TEST(Rendezvous, WaitersStartedFirstGetTheBlob) {
  const std::string path = temp_path("first");
  fs::remove(path);
  std::string blob(128, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7);  // binary, NULs
  // Three waiting ranks in child processes, then rank 0 publishes.
  std::vector<pid_t> kids;
  for (int r = 1; r <= 3; ++r) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        _exit(rendezvous_wait(path, "job-a", blob.size(), 20) == blob ? 0 : 1);
      } catch (...) {
        _exit(2);
      }
    }
    kids.push_back(pid);
  }
  usleep(100000);
  rendezvous_publish(path, "job-a", blob);
  for (pid_t pid : kids) {
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  }
  fs::remove(path);
}

TEST(Rendezvous, AnotherJobsFileIsNotTaken) {
  const std::string path = temp_path("stale");
  rendezvous_publish(path, "old-job", std::string(16, 'x'));
  try {
    rendezvous_wait(path, "new-job", 16, 0.2);
    FAIL() << "took the previous job's blob";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("new-job"), std::string::npos) << msg;
  }
  rendezvous_publish(path, "new-job", std::string(16, 'y'));
  EXPECT_EQ(rendezvous_wait(path, "new-job", 16, 1), std::string(16, 'y'));
  EXPECT_THROW(rendezvous_publish(path, "two\nlines", "z"), Error);
  EXPECT_THROW(rendezvous_publish("/nonexistent-dir/rdv", "job", "z"), Error);
  fs::remove(path);
}

}  // namespace
}  // namespace megaops
