#include "trainer/scores.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/svg_plot.h"

namespace wxtrain::trainer {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string date_only(int64_t seconds, data::Calendar calendar) {
  return data::from_seconds(seconds, calendar).to_iso().substr(0, 10);
}

// Day of year (1-based) of a time point, as xarray's dayofyear (see Climatology::compute).
int day_of_year(int64_t seconds, data::Calendar calendar) {
  const data::DateTime date = data::from_seconds(seconds, calendar);
  int day = date.day;
  for (int m = 1; m < date.month; ++m) day += data::days_in_month(date.year, m, calendar);
  return day;
}

// The length the climatology's window wraps over: 360, 365 or 366.
int year_length(data::Calendar calendar) {
  switch (calendar) {
    case data::Calendar::k360Day: return 360;
    case data::Calendar::kNoLeap: return 365;
    default: return 366;
  }
}

// Distance in days between two days of year on a year of `length` days that wraps around.
int circular_distance(int a, int b, int length) {
  const int d = std::abs(a - b) % length;
  return std::min(d, length - d);
}

// sum / count where count > 0, else `fallback` (float32 out).
torch::Tensor mean_or(const torch::Tensor& sum, const torch::Tensor& count, const torch::Tensor& fallback) {
  const torch::Tensor has = count > 0;
  torch::Tensor m = (sum / count.clamp_min(1).to(torch::kFloat64)).to(torch::kFloat32);
  return torch::where(has, m, fallback);
}

std::string format_number(double value, const char* format = "%.9g") {
  if (std::isnan(value)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string lead_label(const LeadScores& s, int64_t l) {
  if (!s.lead_hours.empty()) return format_number(s.lead_hours[static_cast<size_t>(l)], "%g") + "h";
  return std::to_string(s.lead_steps[static_cast<size_t>(l)]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Climatology

Climatology Climatology::compute(const data::Dataset& dataset, int64_t time_begin, int64_t time_end,
                                 const std::vector<int64_t>& valid_seconds, int window_days) {
  if (time_begin < 0 || time_end > dataset.num_times() || time_begin >= time_end) {
    throw Error("climatology: the training states [" + std::to_string(time_begin) + ", " + std::to_string(time_end) +
                ") are not a non-empty range of the dataset's " + std::to_string(dataset.num_times()) + " states");
  }
  if (window_days < 0) {
    throw Error("climatology: window_days is " + std::to_string(window_days) + "; expected 0 or more days");
  }
  const data::TimeAxis& axis = dataset.time_axis();
  Climatology c;
  c.has_dates_ = axis.has_dates;
  c.calendar_ = axis.calendar;
  c.window_days_ = window_days;
  c.num_states_ = time_end - time_begin;
  if (c.has_dates_) {
    c.first_date_ = date_only(axis.seconds[static_cast<size_t>(time_begin)], axis.calendar);
    c.last_date_ = date_only(axis.seconds[static_cast<size_t>(time_end - 1)], axis.calendar);
  }
  // The band's states under model parallelism (Dataset::set_band): each rank keeps the climatology
  // of the rows it scores.
  const std::vector<int64_t> shape = dataset.point_set()
                                         ? std::vector<int64_t>{dataset.num_variables(), 1, dataset.band_length()}
                                         : std::vector<int64_t>{dataset.num_variables(), dataset.band_length(), dataset.num_lon()};
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);

  // Per needed day: the float64 sum, the float32 count of finite values per point (exact up to
  // 2^24 states in a window) and how many states fell in the window at all.
  struct Day {
    int day;
    torch::Tensor sum, count;
    int64_t states = 0;
  };
  std::vector<Day> days;
  if (c.has_dates_) {
    std::set<int> needed;
    for (int64_t s : valid_seconds) needed.insert(day_of_year(s, c.calendar_));
    for (int d : needed) days.push_back({d, torch::zeros(shape, f64), torch::zeros(shape, f32), 0});
  }
  const int length = year_length(c.calendar_);
  torch::Tensor total_sum = torch::zeros(shape, f64), total_count = torch::zeros(shape, f32);
  for (int64_t t = time_begin; t < time_end; ++t) {
    const torch::Tensor state = dataset.band_state(t);  // read-only: not modified below
    const torch::Tensor finite = torch::isfinite(state);
    const torch::Tensor values = torch::where(finite, state, torch::zeros({}, f32)).to(torch::kFloat64);
    const torch::Tensor count = finite.to(torch::kFloat32);
    total_sum += values;
    total_count += count;
    if (days.empty()) continue;
    const int doy = day_of_year(axis.seconds[static_cast<size_t>(t)], c.calendar_);
    for (Day& day : days) {
      if (circular_distance(day.day, doy, length) > window_days) continue;
      day.sum += values;
      day.count += count;
      ++day.states;
    }
  }
  c.mean_ = mean_or(total_sum, total_count, torch::full(shape, std::numeric_limits<float>::quiet_NaN(), f32));
  for (Day& day : days) {
    if (day.states == 0) ++c.fallback_days_;
    c.by_day_[day.day] = day.states == 0 ? c.mean_ : mean_or(day.sum, day.count, c.mean_);
    day.sum = torch::Tensor();  // free the float64 sums as we go: the peak is the build, not twice it
    day.count = torch::Tensor();
  }
  return c;
}

torch::Tensor Climatology::at(int64_t seconds) const {
  if (!has_dates_) return mean_;
  const int doy = day_of_year(seconds, calendar_);
  const auto it = by_day_.find(doy);
  if (it == by_day_.end()) {
    throw Error("climatology: no mean for " + data::from_seconds(seconds, calendar_).to_iso() + " (day of year " +
                std::to_string(doy) + "): it was not among the valid times the climatology was computed for");
  }
  return it->second;
}

std::string Climatology::describe() const {
  if (!has_dates_) return "climatology: mean of the " + std::to_string(num_states_) + " training states (no dates)";
  std::string text = "climatology: day of year ±" + std::to_string(window_days_) + " days over " + first_date_ + ".." +
                     last_date_ + " (" + std::to_string(num_states_) + " states), " + std::to_string(days_needed()) +
                     " days needed";
  if (fallback_days_ > 0) {
    text += ", " + std::to_string(fallback_days_) + " of them from the all-time mean: no training state within ±" +
            std::to_string(window_days_) + " days";
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Scores

torch::Tensor rank_histogram(const torch::Tensor& members, const torch::Tensor& truth, const torch::Tensor& counted) {
  if (!members.defined() || !truth.defined() || members.dim() != 5 || truth.dim() != 4 ||
      members.size(0) != truth.size(0) || members.sizes().slice(2) != truth.sizes().slice(1)) {
    std::ostringstream got;
    if (members.defined()) got << members.sizes(); else got << "none";
    got << " and ";
    if (truth.defined()) got << truth.sizes(); else got << "none";
    throw Error("rank histogram: members and truth are " + got.str() + "; expected [B, M, V, lat, lon] and [B, V, lat, lon]");
  }
  const int64_t M = members.size(1);
  const torch::Tensor x = members.detach().to(torch::kCPU, torch::kFloat64);
  const torch::Tensor o = truth.detach().to(torch::kCPU, torch::kFloat64).unsqueeze(1);
  torch::Tensor valid = torch::isfinite(o.squeeze(1)).logical_and(torch::isfinite(x).all(1));
  if (counted.defined()) valid = valid.logical_and(counted.detach().to(torch::kCPU).to(torch::kBool).expand_as(valid));
  const torch::Tensor below = (x < o).sum(1);  // [B, V, lat, lon]: the lowest rank the truth can take
  const torch::Tensor ties = (x == o).sum(1);  // members equal to the truth: ranks below .. below + ties
  const torch::Tensor share = valid.to(torch::kFloat64) / (ties + 1).to(torch::kFloat64);
  const std::vector<int64_t> over = {0, 2, 3};
  std::vector<torch::Tensor> bins;
  for (int64_t r = 0; r <= M; ++r)
    bins.push_back(torch::where((below <= r).logical_and(below + ties >= r), share, torch::zeros({}, torch::kFloat64)).sum(over));
  return torch::stack(bins, 1);  // [V, M + 1]
}

ScoreAccumulator::ScoreAccumulator(std::vector<std::string> names, int64_t leads, std::vector<std::string> forecasters,
                                   torch::Tensor weights, std::vector<std::string> units)
    : names_(std::move(names)), forecasters_(std::move(forecasters)), units_(std::move(units)), leads_(leads) {
  if (names_.empty()) throw Error("scores: no channels to score");
  if (forecasters_.empty()) throw Error("scores: no forecasters to score");
  if (leads_ < 1) throw Error("scores: " + std::to_string(leads_) + " leads; expected 1 or more");
  if (!weights.defined() || weights.dim() != 2) {
    throw Error("scores: the weights must be a [lat, lon] field; got " +
                (weights.defined() ? std::to_string(weights.dim()) + " dimensions" : std::string("none")));
  }
  if (units_.empty()) units_.assign(names_.size(), "");
  if (units_.size() != names_.size()) {
    throw Error("scores: " + std::to_string(units_.size()) + " units for " + std::to_string(names_.size()) +
                " channels; expected one per channel");
  }
  weights_ = weights.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  ensemble_forecasters_.assign(forecasters_.size(), false);
  sums_ = torch::zeros({static_cast<int64_t>(forecasters_.size()), leads_, static_cast<int64_t>(names_.size()), 6},
                       torch::kFloat64);
}

void ScoreAccumulator::add(int forecaster, int64_t lead, const torch::Tensor& forecast, const torch::Tensor& truth,
                           const torch::Tensor& climatology, const torch::Tensor& mask) {
  accumulate(forecaster, lead, forecast, torch::Tensor(), truth, climatology, mask);
}

void ScoreAccumulator::add_ensemble(int forecaster, int64_t lead, const torch::Tensor& members,
                                    const torch::Tensor& truth, const torch::Tensor& climatology,
                                    const torch::Tensor& mask) {
  if (!members.defined() || members.dim() != 5 || members.size(1) < 2) {
    std::ostringstream got;
    if (members.defined()) got << members.sizes(); else got << "none";
    throw Error("scores: the ensemble of " + forecasters_.at(static_cast<size_t>(std::max(0, forecaster))) + " is " +
                got.str() + "; expected [B, M >= 2, V, lat, lon]");
  }
  add_rank_bins(members.size(1));
  members_ = std::max(members_, members.size(1));
  if (forecaster >= 0 && forecaster < static_cast<int>(forecasters_.size()))
    ensemble_forecasters_[static_cast<size_t>(forecaster)] = true;
  const torch::Tensor x = members.detach().to(torch::kCPU, torch::kFloat64);
  accumulate(forecaster, lead, x.mean(1), x, truth, climatology, mask);
}

void ScoreAccumulator::accumulate(int forecaster, int64_t lead, const torch::Tensor& forecast,
                                  const torch::Tensor& members, const torch::Tensor& truth,
                                  const torch::Tensor& climatology, const torch::Tensor& mask) {
  if (forecaster < 0 || forecaster >= static_cast<int>(forecasters_.size())) {
    throw Error("scores: forecaster " + std::to_string(forecaster) + " out of range; expected 0.." +
                std::to_string(forecasters_.size() - 1));
  }
  if (lead < 0 || lead >= leads_) {
    throw Error("scores: lead " + std::to_string(lead) + " out of range; expected 0.." + std::to_string(leads_ - 1));
  }
  const int64_t V = static_cast<int64_t>(names_.size());
  const std::vector<int64_t> grid = {weights_.size(0), weights_.size(1)};
  auto check = [&](const torch::Tensor& x, const char* what) {
    if (!x.defined() || x.dim() != 4 || x.size(1) != V || x.size(2) != grid[0] || x.size(3) != grid[1] ||
        x.size(0) != forecast.size(0)) {
      std::ostringstream got;
      if (x.defined()) got << x.sizes(); else got << "none";
      throw Error(std::string("scores: the ") + what + " of " + forecasters_[static_cast<size_t>(forecaster)] +
                  " is " + got.str() + "; expected [B, " + std::to_string(V) + ", " + std::to_string(grid[0]) +
                  ", " + std::to_string(grid[1]) + "]");
    }
  };
  check(forecast, "forecast");
  check(truth, "truth");
  check(climatology, "climatology");

  const torch::Tensor o = truth.detach().to(torch::kCPU, torch::kFloat64);
  // The verified points: weight > 0, the mask (when given) non-zero, and a finite truth (a fill
  // point has nothing to verify against).
  torch::Tensor w = weights_.view({1, 1, grid[0], grid[1]}) * torch::isfinite(o).to(torch::kFloat64);
  if (mask.defined()) w = w * (mask.detach().to(torch::kCPU) != 0).to(torch::kFloat64).expand_as(o);
  const torch::Tensor verified = w > 0;
  const torch::Tensor zero = torch::zeros({}, torch::kFloat64);
  // Zeroed outside the verified points, since NaN * 0 is NaN; a NaN forecast at a verified point
  // stays and makes the score NaN.
  const torch::Tensor f = torch::where(verified, forecast.detach().to(torch::kCPU, torch::kFloat64), zero);
  const torch::Tensor c = torch::where(verified, climatology.detach().to(torch::kCPU, torch::kFloat64), zero);
  const torch::Tensor obs = torch::where(verified, o, zero);
  w = torch::where(verified, w, zero);

  const std::vector<int64_t> space = {2, 3};
  const torch::Tensor fa = f - c, oa = obs - c;

  // CRPS per point: a deterministic forecast's is its absolute error; an ensemble's the fair CRPS
  // over its members, the pair sum taken on the sorted members (trainer/training_step.h's afcrps
  // with alpha = 1), and its unbiased variance.
  torch::Tensor crps_points, variance = torch::zeros_like(f);
  if (!members.defined()) {
    crps_points = (f - obs).abs();
  } else {
    const int64_t M = members.size(1);
    const torch::Tensor x = torch::where(verified.unsqueeze(1), members, zero);
    const torch::Tensor skill = (x - obs.unsqueeze(1)).abs().mean(1);
    const torch::Tensor coefficient = (torch::arange(1, M + 1, x.options()) * 2 - static_cast<double>(M + 1)).view({1, M, 1, 1, 1});
    const torch::Tensor pairs = (std::get<0>(x.sort(1)) * coefficient).sum(1);
    crps_points = skill - pairs / static_cast<double>(M * (M - 1));
    variance = (x - x.mean(1, /*keepdim=*/true)).square().sum(1) / static_cast<double>(M - 1);
  }
  // The per-sample sums over the grid points every score is a ratio of, [B, V] each: summed over
  // a model-parallel group's bands they are the whole grid's (score_bands).
  torch::Tensor partial = torch::stack({w.sum(space), (w * (f - obs).square()).sum(space), (w * fa * oa).sum(space),
                                        (w * fa.square()).sum(space), (w * oa.square()).sum(space),
                                        (w * crps_points).sum(space), (w * variance).sum(space)},
                                       2);  // [B, V, 7]
  if (sum_over_group_) sum_over_group_(partial);
  const torch::Tensor weight = partial.select(2, 0);
  const torch::Tensor counted = weight > 0;
  const torch::Tensor mse = partial.select(2, 1) / weight;
  const torch::Tensor den = (partial.select(2, 3) * partial.select(2, 4)).sqrt();
  // A zero denominator is a forecast (or truth) without anomaly: acc_t = 0 (see scores.h). NaN is
  // not zero, so a NaN forecast stays NaN.
  const torch::Tensor acc = torch::where(den == 0, zero, partial.select(2, 2) / den);
  const torch::Tensor crps = partial.select(2, 5) / weight;
  const torch::Tensor var = partial.select(2, 6) / weight;

  torch::Tensor row = sums_[forecaster][lead];  // [V, 6], a view into sums_
  if (records_samples_) {
    row.select(1, 0) += torch::where(counted, mse, zero).sum(0);
    row.select(1, 1) += torch::where(counted, acc, zero).sum(0);
    row.select(1, 2) += counted.to(torch::kFloat64).sum(0);
    row.select(1, 3) += torch::where(counted, crps, zero).sum(0);
    if (members.defined()) {
      row.select(1, 4) += torch::where(counted, var, zero).sum(0);
      row.select(1, 5) += counted.to(torch::kFloat64).sum(0);
    }
  }
  // The rank histogram over the verified points (members unmasked: their zeros at unverified
  // points are not counted anyway): per point, so every band adds its own.
  if (members.defined()) row.narrow(1, 6, rank_bins_) += rank_histogram(members, o, verified);
}

void ScoreAccumulator::score_bands(std::function<void(torch::Tensor&)> sum_over_group, bool records_samples) {
  sum_over_group_ = std::move(sum_over_group);
  records_samples_ = records_samples;
}

void ScoreAccumulator::add_rank_bins(int64_t members) {
  if (rank_bins_ == members + 1) return;
  if (rank_bins_ != 0) {
    throw Error("scores: an ensemble of " + std::to_string(members) + " members after one of " +
                std::to_string(rank_bins_ - 1) + ": one validation's rank histogram needs one ensemble size");
  }
  rank_bins_ = members + 1;
  std::vector<int64_t> sizes = sums_.sizes().vec();
  sizes.back() = rank_bins_;
  sums_ = torch::cat({sums_, torch::zeros(sizes, torch::kFloat64)}, 3);
}

void ScoreAccumulator::expect_ensemble(int forecaster, int64_t members) {
  if (members < 2) return;
  add_rank_bins(members);
  members_ = std::max(members_, members);
  ensemble_forecasters_.at(static_cast<size_t>(forecaster)) = true;
}

void ScoreAccumulator::set_sums(torch::Tensor sums) {
  if (!sums.defined() || sums.sizes() != sums_.sizes()) {
    std::ostringstream got, expected;
    if (sums.defined()) got << sums.sizes(); else got << "none";
    expected << sums_.sizes();
    throw Error("scores: set_sums got sums of shape " + got.str() + "; expected " + expected.str());
  }
  sums_ = sums.detach().to(torch::kCPU, torch::kFloat64).contiguous();
}

LeadScores ScoreAccumulator::result(int64_t step, int64_t lead_seconds) const {
  LeadScores s;
  s.step = step;
  s.names = names_;
  s.units = units_;
  s.forecasters = forecasters_;
  const size_t F = forecasters_.size(), V = names_.size();
  const auto L = static_cast<size_t>(leads_);
  for (size_t l = 0; l < L; ++l) {
    s.lead_steps.push_back(static_cast<int64_t>(l) + 1);
    if (lead_seconds > 0) s.lead_hours.push_back(static_cast<double>(l + 1) * static_cast<double>(lead_seconds) / 3600.0);
  }
  const torch::Tensor sums = sums_.contiguous();
  const double* p = sums.data_ptr<double>();
  const auto columns = static_cast<size_t>(sums.size(3));
  auto at = [&](size_t f, size_t l, size_t v, size_t k) { return p[((f * L + l) * V + v) * columns + k]; };
  s.rmse.assign(F, std::vector<std::vector<double>>(L, std::vector<double>(V, kNaN)));
  s.acc = s.rmse;
  s.crps = s.rmse;
  s.spread = s.rmse;
  s.ensemble_members = members_;
  s.ensemble_forecasters = ensemble_forecasters_;
  s.ranks.assign(F, std::vector<std::vector<std::vector<double>>>(L, std::vector<std::vector<double>>(V)));
  s.samples.assign(L, 0);
  for (size_t f = 0; f < F; ++f) {
    for (size_t l = 0; l < L; ++l) {
      for (size_t v = 0; v < V; ++v) {
        const double n = at(f, l, v, 2);
        s.samples[l] = std::max(s.samples[l], static_cast<int64_t>(std::llround(n)));
        if (n <= 0) continue;
        s.rmse[f][l][v] = std::sqrt(at(f, l, v, 0) / n);
        s.acc[f][l][v] = at(f, l, v, 1) / n;
        s.crps[f][l][v] = at(f, l, v, 3) / n;
        const double ensembles = at(f, l, v, 5);
        if (ensembles > 0) s.spread[f][l][v] = std::sqrt(at(f, l, v, 4) / ensembles);
        if (rank_bins_ > 0 && f < ensemble_forecasters_.size() && ensemble_forecasters_[f])
          for (int64_t r = 0; r < rank_bins_; ++r) s.ranks[f][l][v].push_back(at(f, l, v, 6 + static_cast<size_t>(r)));
      }
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Table and CSV

std::string scores_table(const LeadScores& s) {
  std::ostringstream out;
  const int64_t L = s.num_leads();
  out << "validation at step " << s.step << ": "
      << (s.area_weighted       ? "area-weighted"
          : s.latitude_weighted ? "latitude-weighted"
                                : "unweighted (the grid has no latitudes)")
      << " RMSE (data units, lower is better) and ACC "
      << "(higher is better), " << (s.samples.empty() ? 0 : s.samples.front()) << " samples\n";
  if (s.ensemble())
    out << "  ensemble of " << s.ensemble_members << " members: model RMSE and ACC are the ensemble mean's; fair CRPS "
        << "(lower is better; a deterministic forecast's is its MAE), spread and spread/skill (1 = reliable)\n";
  // Up to 10 leads all of them; beyond, the first, four evenly spaced middle ones and the last.
  std::vector<int64_t> rows;
  if (L <= 10) {
    for (int64_t l = 0; l < L; ++l) rows.push_back(l);
  } else {
    std::set<int64_t> picked = {0, L - 1};
    for (int i = 1; i <= 4; ++i) picked.insert(static_cast<int64_t>(std::llround(i * (L - 1) / 5.0)));
    rows.assign(picked.begin(), picked.end());
  }
  struct Column {
    std::string label;
    size_t forecaster;
    enum Kind { kRmse, kAcc, kCrps, kSpread, kSpreadSkill } kind;
  };
  std::vector<Column> columns;
  for (size_t f = 0; f < s.forecasters.size(); ++f) columns.push_back({s.forecasters[f] + " RMSE", f, Column::kRmse});
  for (size_t f = 0; f < s.forecasters.size(); ++f)
    if (s.forecasters[f] != "climatology") columns.push_back({s.forecasters[f] + " ACC", f, Column::kAcc});
  if (s.ensemble()) {
    // CRPS of every forecaster (the deterministic ones': their MAE), then the ensemble's spread
    // and spread/skill.
    for (size_t f = 0; f < s.forecasters.size(); ++f) columns.push_back({s.forecasters[f] + " CRPS", f, Column::kCrps});
    for (size_t f = 0; f < s.forecasters.size(); ++f) {
      if (!s.is_ensemble(f)) continue;
      columns.push_back({s.forecasters[f] + " spread", f, Column::kSpread});
      columns.push_back({"spread/skill", f, Column::kSpreadSkill});
    }
  }
  char buf[64];
  for (size_t v = 0; v < s.names.size(); ++v) {
    out << "  " << s.names[v];
    if (v < s.units.size() && !s.units[v].empty()) out << " [" << s.units[v] << "]";
    out << "\n    " << std::string(8 - 4, ' ') << "lead";
    for (const auto& c : columns) {
      std::snprintf(buf, sizeof buf, " %*s", static_cast<int>(std::max<size_t>(11, c.label.size())), c.label.c_str());
      out << buf;
    }
    out << "\n";
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto l = static_cast<size_t>(rows[r]);
      if (r > 0 && rows[r] != rows[r - 1] + 1) out << "    " << std::string(5, ' ') << "...\n";
      std::snprintf(buf, sizeof buf, "    %8s", lead_label(s, rows[r]).c_str());
      out << buf;
      for (const auto& c : columns) {
        const size_t f = c.forecaster;
        double value = s.rmse[f][l][v];
        if (c.kind == Column::kAcc) value = s.acc[f][l][v];
        if (c.kind == Column::kCrps) value = s.crps[f][l][v];
        if (c.kind == Column::kSpread) value = s.spread[f][l][v];
        if (c.kind == Column::kSpreadSkill) value = s.spread[f][l][v] / s.rmse[f][l][v];
        const bool ratio = c.kind == Column::kAcc || c.kind == Column::kSpreadSkill;
        const std::string text = ratio ? format_number(value, "%.3f") : format_number(value, "%.5g");
        std::snprintf(buf, sizeof buf, " %*s", static_cast<int>(std::max<size_t>(11, c.label.size())), text.c_str());
        out << buf;
      }
      out << "\n";
    }
  }
  return out.str();
}

void write_scores_csv(const std::string& path, const LeadScores& s, bool append) {
  // The rank histogram's bins: as many as any ensemble forecaster has (M + 1).
  size_t bins = 0;
  for (const auto& by_lead : s.ranks)
    for (const auto& by_channel : by_lead)
      for (const auto& counts : by_channel) bins = std::max(bins, counts.size());
  // A deterministic file ends with the MAE of every forecaster (an ensemble's file has it as the
  // deterministic forecasters' crps). A file written before that column existed (header ending at
  // acc) is appended to in its own columns, so a resumed run keeps one table.
  const std::string legacy = "step,lead,lead_hours,variable,forecaster,rmse,acc\n";
  std::string header = std::string("step,lead,lead_hours,variable,forecaster,rmse,acc") +
                       (s.ensemble() ? ",crps,spread,spread_skill" : ",mae");
  if (s.ensemble())
    for (size_t r = 0; r < bins; ++r) header += ",rank_" + std::to_string(r);
  header += "\n";
  bool mae = !s.ensemble();
  std::string text;
  if (append && std::filesystem::exists(path)) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream old;
    old << in.rdbuf();
    text = old.str();
    if (mae && text.compare(0, legacy.size(), legacy) == 0) {
      header = legacy;
      mae = false;
    }
    if (!text.empty() && text.compare(0, header.size(), header) != 0) {
      throw Error(path + " starts with '" + text.substr(0, text.find('\n')) + "', not the scores header '" +
                  header.substr(0, header.size() - 1) + "': not appending scores to another table");
    }
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  if (text.empty()) text = header;
  std::ostringstream rows;
  for (int64_t l = 0; l < s.num_leads(); ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string hours = s.lead_hours.empty() ? "" : format_number(s.lead_hours[li], "%g");
    for (size_t v = 0; v < s.names.size(); ++v) {
      for (size_t f = 0; f < s.forecasters.size(); ++f) {
        rows << s.step << "," << s.lead_steps[li] << "," << hours << "," << s.names[v] << "," << s.forecasters[f]
             << "," << format_number(s.rmse[f][li][v]) << "," << format_number(s.acc[f][li][v]);
        if (mae) rows << "," << format_number(f < s.crps.size() ? s.crps[f][li][v] : kNaN);
        if (s.ensemble()) {
          // Spread is the ensemble's alone: empty for the deterministic forecasters.
          const bool spread = s.is_ensemble(f);
          rows << "," << format_number(s.crps[f][li][v]);
          if (spread) rows << "," << format_number(s.spread[f][li][v]) << "," << format_number(s.spread[f][li][v] / s.rmse[f][li][v]);
          else rows << ",,";
          // The rank histogram's counts (fractions where ties were split), empty for the others.
          const std::vector<double>* counts = f < s.ranks.size() ? &s.ranks[f][li][v] : nullptr;
          for (size_t r = 0; r < bins; ++r)
            rows << "," << (counts && r < counts->size() ? format_number((*counts)[r], "%.10g") : "");
        }
        rows << "\n";
      }
    }
  }
  write_file_atomically(path, text + rows.str());
}

// ---------------------------------------------------------------------------------------------
// SVG

namespace {

const char* color_of(size_t forecaster, const std::string& name) {
  if (name == "model") return "#1f77b4";
  if (name == "persistence") return "#ff7f0e";
  if (name == "climatology") return "#2ca02c";
  static const char* palette[] = {"#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return palette[forecaster % 7];
}

}  // namespace

std::string scores_svg(const LeadScores& s, const std::string& title) {
  const size_t V = s.names.size(), F = s.forecasters.size(), L = static_cast<size_t>(s.num_leads());
  if (V == 0 || L == 0) throw Error("scores_svg: no channels or no leads to draw");
  const size_t columns = std::min<size_t>(V, 3);
  std::vector<double> xs;
  for (size_t l = 0; l < L; ++l)
    xs.push_back(s.lead_hours.empty() ? static_cast<double>(s.lead_steps[l]) : s.lead_hours[l]);

  // The RMSE plots in rows of up to three channels, then the ACC plots in rows of their own.
  FigureSpec figure;
  figure.title = title;
  for (const bool acc : {false, true}) {
    for (size_t v = 0; v < V; ++v) {
      PlotSpec plot;
      plot.title = s.names[v] + (acc ? " ACC" : " RMSE");
      if (!acc && v < s.units.size() && !s.units[v].empty()) plot.title += " [" + s.units[v] + "]";
      plot.x_label = s.lead_hours.empty() ? "lead (steps)" : "lead (hours)";
      plot.y_includes_zero = false;
      for (size_t f = 0; f < F; ++f) {
        Series line{s.forecasters[f], xs, {}, color_of(f, s.forecasters[f])};
        for (size_t l = 0; l < L; ++l) line.y.push_back(acc ? s.acc[f][l][v] : s.rmse[f][l][v]);
        line.dots = true;
        plot.series.push_back(std::move(line));
      }
      if (v % columns == 0) figure.rows.emplace_back();
      figure.rows.back().push_back(std::move(plot));
    }
  }
  // An ensemble: the CRPS of every forecaster (the deterministic ones' MAE), then each ensemble's
  // spread (dashed) beside its ensemble mean's RMSE, in rows of their own.
  if (s.ensemble()) {
    for (const bool spread : {false, true}) {
      for (size_t v = 0; v < V; ++v) {
        PlotSpec plot;
        plot.title = s.names[v] + (spread ? " spread and RMSE" : " CRPS");
        if (v < s.units.size() && !s.units[v].empty()) plot.title += " [" + s.units[v] + "]";
        plot.x_label = s.lead_hours.empty() ? "lead (steps)" : "lead (hours)";
        plot.y_includes_zero = spread;
        for (size_t f = 0; f < F; ++f) {
          if (spread && !s.is_ensemble(f)) continue;
          Series line{s.forecasters[f], xs, {}, color_of(f, s.forecasters[f])};
          for (size_t l = 0; l < L; ++l) line.y.push_back(spread ? s.rmse[f][l][v] : s.crps[f][l][v]);
          line.dots = true;
          plot.series.push_back(line);
          if (!spread) continue;
          Series dispersion{s.forecasters[f] + " spread", xs, {}, color_of(f, s.forecasters[f])};
          for (size_t l = 0; l < L; ++l) dispersion.y.push_back(s.spread[f][l][v]);
          dispersion.dashed = true;
          dispersion.dots = true;
          plot.series.push_back(std::move(dispersion));
        }
        if (v % columns == 0) figure.rows.emplace_back();
        figure.rows.back().push_back(std::move(plot));
      }
    }
  }
  // An ensemble's rank histograms: per channel, a bar per rank at each of a few leads, against the
  // flat histogram of a reliable ensemble.
  static const char* lead_colors[] = {"#9ecae1", "#4292c6", "#08306b"};
  const std::vector<size_t> leads = rank_histogram_leads(L);
  for (size_t f = 0; f < F && f < s.ranks.size(); ++f) {
    if (!s.is_ensemble(f)) continue;
    for (size_t v = 0; v < V; ++v) {
      PlotSpec plot;
      plot.title = s.names[v] + " rank histogram";
      if (s.forecasters[f] != "model") plot.title = s.forecasters[f] + " " + plot.title;
      plot.x_label = "rank of the truth";
      size_t bins = 0;
      for (size_t i = 0; i < leads.size(); ++i) {
        const std::vector<double> freq = rank_frequencies(s.ranks[f][leads[i]][v]);
        if (freq.empty()) continue;
        bins = std::max(bins, freq.size());
        Series bars{"lead " + lead_label(s, static_cast<int64_t>(leads[i])), {}, freq, lead_colors[i % 3]};
        for (size_t r = 0; r < freq.size(); ++r) bars.x.push_back(static_cast<double>(r));
        bars.bars = true;
        plot.series.push_back(std::move(bars));
      }
      if (bins == 0) continue;
      Series flat{"flat (reliable)", {-0.5, static_cast<double>(bins) - 0.5}, {1.0, 1.0}, "#333333"};
      flat.dashed = true;
      plot.series.push_back(std::move(flat));
      if (v % columns == 0) figure.rows.emplace_back();
      figure.rows.back().push_back(std::move(plot));
    }
  }
  return render_svg(figure);
}

std::vector<double> rank_frequencies(const std::vector<double>& counts) {
  double total = 0;
  for (double c : counts) total += c;
  if (counts.empty() || !(total > 0)) return {};
  std::vector<double> out;
  for (double c : counts) out.push_back(c * static_cast<double>(counts.size()) / total);
  return out;
}

std::vector<size_t> rank_histogram_leads(size_t leads) {
  std::vector<size_t> out;
  for (size_t l : {size_t{0}, (leads - 1) / 2, leads - 1})
    if (leads > 0 && (out.empty() || out.back() != l)) out.push_back(l);
  return out;
}

}  // namespace wxtrain::trainer
