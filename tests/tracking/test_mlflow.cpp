// The MLflow side without a server: the journal a run keeps, and the errors when no server
// answers. (A real server: tracking.mlflow_server.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/run_file_text.h"
#include "tracking/mlflow/mlflow_journal.h"

namespace wxtrain::tracking {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Mlflow, NoServerNamesTheAddressAndTheRequest) {
  MlflowClient client("http://127.0.0.1:9", 2);  // the discard port: nothing listens
  try {
    client.experiment_id("storm");
    FAIL() << "expected MlflowError";
  } catch (const MlflowError& e) {
    EXPECT_EQ(e.http_status(), 0);
    EXPECT_EQ(std::string(e.what()).rfind("MLflow at http://127.0.0.1:9 did not answer GET /api/2.0/mlflow/experiments/get-by-name", 0), 0u)
        << e.what();
  }
}

TEST(Mlflow, WhatCouldNotBeSentStaysInTheJournal) {
  const fs::path dir = fresh_dir("wxtrain_mlflow_journal_test");
  {
    MlflowJournal journal(dir.string(), "http://127.0.0.1:9", /*fresh=*/true);
    journal.append({{"type", "start"}, {"experiment", "e"}, {"run_name", "r"}, {"start_time", 1}, {"tags", nlohmann::json::array()}});
    journal.append({{"type", "metrics"}, {"metrics", {{"loss", 0.5, 1000, 1}}}});
  }
  MlflowSender sender(dir.string(), "", 2);
  EXPECT_EQ(sender.uri(), "http://127.0.0.1:9");
  EXPECT_EQ(sender.pending_entries(), 2);
  EXPECT_THROW(sender.send_pending(), MlflowError);
  EXPECT_EQ(sender.pending_entries(), 2);  // nothing was taken, nothing dropped
  // A second sender (`wxtrain sync --uri`) may name the server by another address.
  MlflowSender other(dir.string(), "http://127.0.0.1:10", 2);
  EXPECT_EQ(other.uri(), "http://127.0.0.1:10");
  // A line still being written is not an entry yet.
  std::ofstream(dir / "mlflow" / "journal.jsonl", std::ios::app) << "{\"type\":\"metr";
  EXPECT_EQ(sender.pending_entries(), 2);
  fs::remove_all(dir);
}

TEST(Mlflow, OneSenderAtATime) {
  const fs::path dir = fresh_dir("wxtrain_mlflow_lock_test");
  SendLock first(dir.string(), true);
  try {
    SendLock second(dir.string(), true);
    FAIL() << "expected the second lock to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is being sent to MLflow by another process"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Mlflow, SyncWithoutAJournalSaysWhy) {
  const fs::path dir = fresh_dir("wxtrain_mlflow_nojournal_test");
  EXPECT_THROW(SendLock(dir.string(), /*create=*/false), Error);
  EXPECT_FALSE(fs::exists(dir / "mlflow"));  // a folder that is no MLflow run is left as it was
  try {
    MlflowSender sender(dir.string(), "", 2);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no MLflow journal"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tracking.mlflow_uri"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Mlflow, RunFileParametersAreItsFlattenedKeys) {
  const auto params = flatten_run_file(
      "[model]\nname = \"unet\"\nchannels = [8, 16]\n[train]\nlr = 2e-3\ncheckpointing = false\n"
      "[data]\nregion = { lat = [20, 55], lon = [230, 300] }\n[[data.sources]]\nfile = \"a.nc\"\n"
      "[[data.sources]]\nfile = \"b.nc\"\nlevels = [500, 850]\n",
      "t.toml");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"model.name", "unet"},          {"model.channels", "[8, 16]"},         {"train.lr", "0.002"},
      {"train.checkpointing", "false"}, {"data.region.lat", "[20, 55]"},      {"data.region.lon", "[230, 300]"},
      {"data.sources.0.file", "a.nc"},  {"data.sources.1.file", "b.nc"},      {"data.sources.1.levels", "[500, 850]"}};
  EXPECT_EQ(params, expected);
}

}  // namespace
}  // namespace wxtrain::tracking
