#pragma once
// Validation scored the way WeatherBench 2 reports it: for every lead time of a rollout and every
// channel, the latitude-weighted RMSE and the anomaly correlation coefficient (ACC) of the model,
// of persistence (the last input state, repeated) and of climatology (the day-of-year mean of the
// training years), so a model's numbers can be read next to the published headline scores.
//
// - Climatology: the mean state by day of year over the training split (WeatherBench's
//   climatology forecast and the reference the anomalies of ACC are taken against).
// - ScoreAccumulator: per-sample sums in float64, one tensor the caller allreduces across ranks.
// - scores_table / write_scores_csv / scores_svg: the terminal table, the CSV and a figure.
//
// Definitions (WeatherBench 2, Rasp et al. 2024, section 4): with w the latitude weights (times
// the mask of verified points) and t the validation samples,
//   RMSE = sqrt( mean_t( sum_ij w (f - o)^2 / sum_ij w ) )          (per sample, then the mean)
//   ACC  = mean_t( sum_ij w f'o' / sqrt(sum_ij w f'^2 * sum_ij w o'^2) ),  f' = f - c, o' = o - c
// (uncentred anomalies, as WeatherBench 2). An ensemble forecast (add_ensemble, M members x_j)
// is scored as WeatherBench 2 scores ensembles: RMSE and ACC are the ensemble mean's, and
//   CRPS   = mean_t( sum_ij w crps / sum_ij w ),  crps = (1/M) sum_j |x_j - o|
//                                                       - 1/(2 M (M - 1)) sum_{j,k} |x_j - x_k|  (fair)
//   spread = sqrt( mean_t( sum_ij w var / sum_ij w ) ),  var = 1/(M - 1) sum_j (x_j - mean)^2
//   spread/skill = spread / RMSE of the ensemble mean (1 for a reliable ensemble)
// and a deterministic forecast's CRPS is its mean absolute error (it is an ensemble of one).
// An ensemble also gets a rank histogram (Talagrand diagram; Hamill 2001): at every verified point
// the truth's rank among the M members, 0 (below all of them) .. M (above all), counted over the
// points and samples into M + 1 bins (rank_histogram below). A reliable ensemble's is flat; a U
// shape is under-dispersion, a dome over-dispersion, a slope a bias.
// A sample whose forecast or truth has no anomaly at all
// (the climatology forecast itself) has a zero denominator: its acc_t is 0, which is what ACC says
// of a forecast that carries no information beyond climatology.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data/dataset.h"

namespace wxtrain::trainer {

class Climatology {
 public:
  // The mean of the training states [time_begin, time_end) by day of year, for the days of year
  // that `valid_seconds` (the validation times the scores will be taken at) fall on, and only
  // those: memory is (days needed) x V x lat x lon float32 once built (float64 sums plus float32
  // counts of that size while building), so a 0.25-degree archive does not hold 366 fields.
  //
  // Day of year as xarray's dayofyear, which WeatherBench uses: 1..366 in the standard,
  // proleptic_gregorian, julian and all_leap calendars, 1..365 in noleap, 1..360 in 360_day. The
  // window is circular over that length (366 in the leap-capable calendars, so December 31 of a
  // common year, day 365, is two days from January 1): a state counts for day d when its day of
  // year is within window_days of d. NaN (fill) values are skipped point by point. One pass over
  // the training states, each read once through dataset.band_state(t): under model parallelism
  // (Dataset::set_band) the climatology of the rank's band only, [V, band rows, lon].
  //
  // A needed day whose window holds no training state (a training split shorter than a year) uses
  // the all-time training mean, point by point; fallback_days() counts those days. A point with no
  // finite value in its window uses the all-time mean too. Without dates (time_axis().has_dates
  // false) there is no day of year: the climatology is the all-time training mean for every time.
  //
  // Throws wxtrain::Error when [time_begin, time_end) is empty or outside the dataset's time axis,
  // or window_days is negative.
  static Climatology compute(const data::Dataset& dataset, int64_t time_begin, int64_t time_end,
                             const std::vector<int64_t>& valid_seconds, int window_days = 15);

  // float32 [V, lat, lon] (the band's, after Dataset::set_band) in physical units for the time `seconds` (in the dataset's calendar); the
  // all-time mean without dates. The climatology's own tensor (days share it): read it, do not
  // modify it in place. Throws wxtrain::Error naming the date when its day of year was not among
  // those compute() was asked for.
  torch::Tensor at(int64_t seconds) const;
  // The all-time training mean, float32 [V, lat, lon] (NaN where a point is never finite).
  torch::Tensor mean() const { return mean_; }

  bool has_dates() const { return has_dates_; }
  int64_t days_needed() const { return static_cast<int64_t>(by_day_.size()); }
  int64_t fallback_days() const { return fallback_days_; }
  // One line: "climatology: day of year ±15 days over 1979-01-01..2015-12-31 (54056 states), 366
  // days needed" (plus ", K of them from the all-time mean: no training state within ±15 days"),
  // or "climatology: mean of the N training states (no dates)".
  std::string describe() const;

 private:
  bool has_dates_ = false;
  data::Calendar calendar_ = data::Calendar::kStandard;
  int window_days_ = 0;
  int64_t num_states_ = 0;
  int64_t fallback_days_ = 0;
  std::string first_date_, last_date_;
  torch::Tensor mean_;                     // [V, lat, lon] float32
  std::map<int, torch::Tensor> by_day_;    // day of year -> [V, lat, lon] float32
};

// Scores of every forecaster at every lead: what one validation reports.
struct LeadScores {
  int64_t step = 0;                       // training step the validation ran at
  std::vector<std::string> names;         // channels
  std::vector<std::string> units;         // per channel, "" when unknown
  std::vector<std::string> forecasters;   // "model", "persistence", "climatology"
  std::vector<int64_t> lead_steps;        // 1..L
  std::vector<double> lead_hours;         // per lead when the data has dates; empty otherwise
  // False when the grid has no latitudes (Dataset::has_coordinates): every point weighs the same.
  bool latitude_weighted = true;
  // A point-set grid (data/grid.h): each cell weighs its area, as the table's header says.
  bool area_weighted = false;
  // [forecaster][lead][channel]; NaN where no sample was verified (or the forecast had NaN).
  std::vector<std::vector<std::vector<double>>> rmse, acc;
  // Ensembles (ensemble_members > 1; empty otherwise): members of the ensemble forecaster (its rmse
  // and acc are its mean's), [forecaster][lead][channel] CRPS (a deterministic forecaster's: its
  // MAE) and spread (NaN for a deterministic forecaster).
  int64_t ensemble_members = 1;
  std::vector<std::vector<std::vector<double>>> crps, spread;
  std::vector<bool> ensemble_forecasters;  // [forecaster]: scored as an ensemble (add_ensemble)
  // [forecaster][lead][channel][rank 0..M]: the rank histogram's counts for an ensemble forecaster
  // (ties split, see rank_histogram); empty vectors for the deterministic ones.
  std::vector<std::vector<std::vector<std::vector<double>>>> ranks;
  bool ensemble() const { return ensemble_members > 1; }
  bool is_ensemble(size_t forecaster) const {
    return forecaster < ensemble_forecasters.size() && ensemble_forecasters[forecaster];
  }
  std::vector<int64_t> samples;           // validation samples per lead (over all ranks)

  int64_t num_leads() const { return static_cast<int64_t>(lead_steps.size()); }
};

class ScoreAccumulator {
 public:
  // `weights`: float32 [lat, lon], the caller's cos-latitude weights (already times a 0/1 interior
  // mask for limited-area runs). `units` per channel for the table and the figure (may be empty).
  // Throws wxtrain::Error for an empty channel or forecaster list, leads < 1, or weights that are
  // not 2-D.
  ScoreAccumulator(std::vector<std::string> names, int64_t leads, std::vector<std::string> forecasters,
                   torch::Tensor weights, std::vector<std::string> units = {});

  // One batch for one forecaster at one lead (0-based). forecast, truth, climatology: float32
  // [B, V, lat, lon] on the CPU in physical units; mask: 1 verified / 0 fill, [B, V, lat, lon] (or
  // broadcastable to it), or undefined. Points where the mask is 0 or the truth is NaN do not
  // count; a NaN forecast at a verified point makes the score NaN, so a diverged model shows. A
  // sample with no verified point in a channel is not counted for that channel. Throws
  // wxtrain::Error naming the mismatched shape or the index out of range.
  void add(int forecaster, int64_t lead, const torch::Tensor& forecast, const torch::Tensor& truth,
           const torch::Tensor& climatology, const torch::Tensor& mask = {});
  // An ensemble forecast: members float32 [B, M, V, lat, lon] (M >= 2), the rest as add(). Scores
  // the ensemble mean's RMSE and ACC, the fair CRPS and the spread (scores.h's definitions); the
  // result then reports M members. Throws wxtrain::Error as add() does, and for M < 2.
  void add_ensemble(int forecaster, int64_t lead, const torch::Tensor& members, const torch::Tensor& truth,
                    const torch::Tensor& climatology, const torch::Tensor& mask = {});

  // float64 [forecasters, leads, V, 6 (+ M + 1)]: per-sample MSE summed, per-sample ACC summed,
  // samples counted, per-sample CRPS (MAE) summed, per-sample ensemble variance summed, samples
  // scored as ensembles counted, and for an ensemble of M members the M + 1 rank-histogram bins
  // (the columns appear with the first add_ensemble or expect_ensemble, so every rank must be told
  // the members before sums() is reduced). Sum it across ranks (allreduce) and hand it back with
  // set_sums before result().
  torch::Tensor sums() const { return sums_; }
  void set_sums(torch::Tensor sums);  // throws wxtrain::Error on a different shape
  // A rank whose share of the validation samples is empty adds nothing, yet reports what the others
  // scored: the validation tells every rank which forecaster is an ensemble of how many members.
  void expect_ensemble(int forecaster, int64_t members);

  // lead_seconds: the model step in seconds (lead l is (l + 1) * lead_seconds); 0 without dates.
  LeadScores result(int64_t step, int64_t lead_seconds) const;

  int64_t num_leads() const { return leads_; }

  // Model parallelism (docs/distributed.md): this accumulator scores one band of the grid (its
  // `weights` and the fields given to add() are the band's) and `sum_over_group` sums a float64
  // CPU tensor in place over the model-parallel group. Every score of one sample is a ratio of sums
  // over its grid points (sum w err^2 / sum w, ACC's three sums, CRPS's and the variance's), so
  // each add() sums the band's per-sample partial sums [B, V, 7] over the group (a collective: the
  // group's ranks call add() in the same order with the same samples) and scores the whole grid
  // from them; no field is gathered. `records_samples`: this rank counts the group's per-sample
  // scores (its first rank), so the world's allreduce of sums() counts each sample once; the rank
  // histogram's counts are per point and every rank adds its band's.
  void score_bands(std::function<void(torch::Tensor&)> sum_over_group, bool records_samples);
  const std::vector<std::string>& forecasters() const { return forecasters_; }

 private:
  std::vector<std::string> names_, forecasters_, units_;
  std::function<void(torch::Tensor&)> sum_over_group_;  // score_bands's; empty: the whole grid here
  bool records_samples_ = true;
  // add() and add_ensemble(): `members` undefined for a deterministic forecast.
  void accumulate(int forecaster, int64_t lead, const torch::Tensor& forecast, const torch::Tensor& members,
                  const torch::Tensor& truth, const torch::Tensor& climatology, const torch::Tensor& mask);

  int64_t leads_;
  // The rank histogram's columns for an ensemble of M members: added once; another M throws.
  void add_rank_bins(int64_t members);

  int64_t members_ = 1;    // the largest ensemble added
  int64_t rank_bins_ = 0;  // M + 1 once an ensemble is added or expected
  std::vector<bool> ensemble_forecasters_;
  torch::Tensor weights_;  // [lat, lon] float64
  torch::Tensor sums_;     // [F, L, V, 6] float64
};

// The rank histogram of an ensemble: members float [B, M, V, lat, lon], truth [B, V, lat, lon],
// counted where `counted` (bool, broadcastable to the truth; undefined = everywhere) holds and the
// truth and every member are finite. Returns float64 [V, M + 1]: bin r counts the points where
// r members lie below the truth. Ties between the truth and k members (a rank anywhere from r to
// r + k) split the point evenly over those k + 1 bins, 1 / (k + 1) each: the expected count of
// breaking ties at random (Hamill 2001; xskillscore's rank_histogram with random_for_tied), without
// a random stream, so a validation stays reproducible. Without the split, ties (a precipitation
// field's dry points, members and truth all 0) would all land in bin 0 (or M) and fake a bias.
torch::Tensor rank_histogram(const torch::Tensor& members, const torch::Tensor& truth, const torch::Tensor& counted = {});

// The terminal table: per channel a block of rows by lead (all of them up to 10 leads; beyond, the
// first, a few evenly spaced middle ones and the last), columns the RMSE of every forecaster and
// the ACC of every forecaster but climatology (whose ACC is 0 by definition).
std::string scores_table(const LeadScores& scores);

// One row per (lead, channel, forecaster): "step,lead,lead_hours,variable,forecaster,rmse,acc"
// (lead_hours empty without dates), then ",mae" for a deterministic file (every forecaster's mean
// absolute error, latitude-weighted as the CRPS: a deterministic forecast's CRPS; a file whose header
// ends at acc, written before this column, is appended to without it); an ensemble's file adds
// ",crps,spread,spread_skill" instead (spread
// and spread_skill empty for the deterministic forecasters) and then the rank histogram of the M
// members as M + 1 columns ",rank_0,...,rank_M" (the counts of rank_histogram, over the verified
// points of every validation sample; empty for the deterministic forecasters): each row stays one
// (step, lead, variable, forecaster) with its measurements. With append the file's earlier rows are kept and the header is
// written once; the whole file is rewritten through write_file_atomically. Throws wxtrain::Error
// when an existing file to append to has another header, WriteError when it cannot be written.
void write_scores_csv(const std::string& path, const LeadScores& scores, bool append);

// A self-contained SVG figure: a legend (one colour per forecaster), then a grid of small panels,
// one per channel, of RMSE against lead (title "<channel> RMSE [units]"), and beneath them the same
// grid for ACC: one figure holds both. Each panel has one <polyline> per forecaster (with a dot
// per lead so a single lead still shows), axes with tick labels, and the lead in hours (steps
// without dates) on the x axis. NaN values are left out of the lines. An ensemble's figure adds a
// grid of CRPS panels ("<channel> CRPS [units]", every forecaster: the deterministic ones' MAE) and
// one of spread panels ("<channel> spread and RMSE [units]": the ensemble's spread, dashed and
// labelled "<forecaster> spread", beside its ensemble mean's RMSE: a reliable ensemble's lines
// meet), and last a grid of rank-histogram panels ("<channel> rank histogram": bars of the
// relative frequency of each rank at up to three leads, the first, middle and last, beside a
// dashed line at 1 where a reliable ensemble's bars end). Drawn by core/svg_plot.h, as the CLI's
// plots are.
std::string scores_svg(const LeadScores& scores, const std::string& title);

// A rank histogram's counts (LeadScores::ranks) as relative frequencies: count x bins / total, so
// every bin of a flat (reliable) histogram is 1 whatever the number of points, a U-shaped
// (under-dispersive) one is above 1 at both ends. Empty for empty or all-zero counts.
std::vector<double> rank_frequencies(const std::vector<double>& counts);

// The leads whose rank histograms are drawn and tracked: the first, the middle and the last of
// `leads` (fewer when there are fewer leads), as indices in increasing order.
std::vector<size_t> rank_histogram_leads(size_t leads);

}  // namespace wxtrain::trainer
