//===- ChoiceILP.cpp - one choice per node, pairwise costs, by CBC --------===//
//
// See ChoiceILP.h. The program is built in one piece (column-wise, through
// Clp's solver interface, as CbcModel takes it); costs are scaled to
// microseconds-sized numbers and memory to MiB, so the solvers' tolerances
// are neither too tight nor too loose for either. Its relaxation is solved
// first by Clp's barrier and rounded; CBC's branch and cut runs only when
// the rounded answer is not proven optimal by it. The greedy heuristic is
// here too: a fallback when CBC's time runs out.
//
//===----------------------------------------------------------------------===//

#include "passes/autoshard/ChoiceILP.h"

#include <coin/CbcModel.hpp>
#include <coin/CbcSolver.hpp>
#include <coin/ClpPresolve.hpp>
#include <coin/ClpSimplex.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <limits>
#include <iterator>

namespace partita::autoshard {

namespace {
/// Seconds in, microseconds to CBC.
constexpr double kCostScale = 1e6;
/// Bytes in, MiB to CBC.
constexpr double kMemoryScale = 1.0 / (1 << 20);

/// The program as rows of (column, coefficient) and per-column bounds.
struct Program {
  std::vector<double> objective, lower, upper;
  std::vector<char> integer;
  std::vector<std::vector<std::pair<int, double>>> columns;
  std::vector<double> rowLower, rowUpper;

  int addColumn(double cost, bool isInteger, double upperBound) {
    objective.push_back(cost);
    lower.push_back(0);
    upper.push_back(upperBound);
    integer.push_back(isInteger);
    columns.emplace_back();
    return static_cast<int>(objective.size() - 1);
  }
  int addRow(double lo, double hi) {
    rowLower.push_back(lo);
    rowUpper.push_back(hi);
    return static_cast<int>(rowLower.size() - 1);
  }
  void set(int row, int column, double value) {
    columns[column].push_back({row, value});
  }
};

/// Each node's edges, with whether the node is the edge's producer.
using Incidence = std::vector<std::vector<std::pair<const ChoiceEdge *, bool>>>;
Incidence incidentEdges(const ChoiceProblem &problem) {
  Incidence incident(problem.nodes.size());
  for (const ChoiceEdge &edge : problem.edges) {
    incident[edge.from].push_back({&edge, true});
    incident[edge.to].push_back({&edge, false});
  }
  return incident;
}

/// Seconds as CBC's options and messages print them ("%g").
std::string formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

/// What a solve that must stop `limit` seconds after it started may still
/// take, `spent` seconds in: the rest, but at least a second (or the whole
/// limit, if shorter).
double secondsLeft(double limit, double spent) {
  return std::max(limit - spent, std::min(limit, 1.0));
}

/// Whether `cost` is no more than `bound` (a lower bound on every answer),
/// but for the solvers' tolerance: then it is optimal.
bool meetsBound(double cost, double bound) {
  return cost <= bound + 1e-7 * std::abs(bound) + 1e-12;
}

bool fail(std::string &error, std::string message) {
  error = std::move(message);
  return false;
}
} // namespace

int64_t numClasses(const std::vector<int64_t> &classes) {
  int64_t count = 0;
  for (int64_t c : classes)
    count = std::max(count, c + 1);
  return count;
}

namespace {
/// What `choices` may hide: the chosen shared pairs' hideable costs (and
/// sharedCost if any, or if paid anyway) through `shared`, the chosen
/// choices' cover through `cover`. Whether any chosen pair needs the shared
/// resource.
bool sharedAndCover(const ChoiceProblem &problem,
                    const std::vector<int64_t> &choices, double &shared,
                    double &cover) {
  shared = cover = 0;
  bool any = false;
  for (const ChoiceEdge &edge : problem.edges) {
    int64_t a = edge.fromClass[choices[edge.from]];
    int64_t b = edge.toClass[choices[edge.to]];
    if (edge.needsShared(a, b)) {
      shared += edge.hideable(a, b);
      any = true;
    }
  }
  if (any || problem.sharedPaid)
    shared += problem.sharedCost;
  for (size_t u = 0; u < problem.nodes.size(); ++u)
    if (!problem.nodes[u].cover.empty())
      cover += problem.nodes[u].cover[choices[u]];
  return any;
}
} // namespace

double evaluateChoices(const ChoiceProblem &problem,
                       const std::vector<int64_t> &choices, double *memory,
                       double *hidden) {
  double total = 0, held = 0;
  for (size_t u = 0; u < problem.nodes.size(); ++u) {
    const ChoiceNode &node = problem.nodes[u];
    total += node.costs[choices[u]];
    if (!node.memory.empty())
      held += node.memory[choices[u]];
  }
  for (const ChoiceEdge &edge : problem.edges)
    total += edge.cost[edge.fromClass[choices[edge.from]]]
                      [edge.toClass[choices[edge.to]]];
  double sharedSeconds = 0, cover = 0;
  if (sharedAndCover(problem, choices, sharedSeconds, cover) ||
      problem.sharedPaid)
    total += problem.sharedCost;
  // (Nothing hides from a forbidden total.)
  double hides = std::isinf(total) ? 0 : std::min(sharedSeconds, cover);
  if (memory)
    *memory = held;
  if (hidden)
    *hidden = hides;
  return total - hides;
}

bool fitsProblem(const ChoiceProblem &problem,
                 const std::vector<int64_t> &choices, double &cost) {
  double memory = 0;
  cost = evaluateChoices(problem, choices, &memory);
  return !std::isinf(cost) &&
         (problem.memoryLimit <= 0 || memory <= problem.memoryLimit);
}

namespace {
/// How a program's solve ended: with an answer, with a proof that none
/// exists, or out of time with none.
enum class Outcome { Solved, NoneExists, GaveUp };

/// CBC on `problem`, with the heuristic as its fallback: a program without
/// shared pairs (what reduceChoices leaves of one), or one whose shared
/// resource is paid (sharedPaid), whose cover is then priced exactly: a
/// column h of what is hidden, at most the hideable pairs' costs and
/// sharedCost (one row) and at most the cover (another), costs -h. The
/// reason for no answer goes to `error`.
Outcome solveProgram(const ChoiceProblem &problem, const ChoiceOptions &options,
                     ChoiceSolution &solution, std::string &error) {
  const int64_t numNodes = problem.nodes.size();
  Program program;
  // One binary column per choice.
  std::vector<std::vector<int>> column(numNodes);
  int memoryRow = -1;
  if (problem.memoryLimit > 0)
    memoryRow = program.addRow(-std::numeric_limits<double>::max(),
                               problem.memoryLimit * kMemoryScale);
  // h - (hideable pairs) <= sharedCost and h - (cover) <= 0.
  int sharedRow = -1, coverRow = -1;
  const double paidConstant = problem.sharedPaid ? problem.sharedCost : 0;
  if (problem.sharedPaid) {
    sharedRow = program.addRow(-std::numeric_limits<double>::max(),
                               problem.sharedCost * kCostScale);
    coverRow = program.addRow(-std::numeric_limits<double>::max(), 0);
  }
  for (int64_t u = 0; u < numNodes; ++u) {
    const ChoiceNode &node = problem.nodes[u];
    int row = program.addRow(1, 1);
    bool any = false;
    for (size_t s = 0; s < node.costs.size(); ++s) {
      bool forbidden = std::isinf(node.costs[s]);
      any |= !forbidden;
      int col = program.addColumn(forbidden ? 0 : node.costs[s] * kCostScale,
                                  /*isInteger=*/true, forbidden ? 0 : 1);
      column[u].push_back(col);
      program.set(row, col, 1);
      if (memoryRow >= 0 && !node.memory.empty() && node.memory[s] != 0)
        program.set(memoryRow, col, node.memory[s] * kMemoryScale);
      if (coverRow >= 0 && !node.cover.empty() && node.cover[s] != 0)
        program.set(coverRow, col, -node.cover[s] * kCostScale);
    }
    if (!any) {
      error = "no choices avoid the forbidden pairs";
      return Outcome::NoneExists;
    }
  }
  int64_t binaries = program.objective.size();

  // Per edge: a continuous e_ab per allowed class pair, tied to both sides'
  // choices by the marginal rows. (reduceChoices has folded the edges with
  // one class on a side into the other side's costs.)
  for (const ChoiceEdge &edge : problem.edges) {
    int64_t fromClasses = numClasses(edge.fromClass);
    int64_t toClasses = numClasses(edge.toClass);
    std::vector<int> fromRow(fromClasses), toRow(toClasses);
    for (int64_t a = 0; a < fromClasses; ++a)
      fromRow[a] = program.addRow(0, 0);
    for (int64_t b = 0; b < toClasses; ++b)
      toRow[b] = program.addRow(0, 0);
    for (size_t s = 0; s < edge.fromClass.size(); ++s)
      program.set(fromRow[edge.fromClass[s]], column[edge.from][s], -1);
    for (size_t t = 0; t < edge.toClass.size(); ++t)
      program.set(toRow[edge.toClass[t]], column[edge.to][t], -1);
    for (int64_t a = 0; a < fromClasses; ++a)
      for (int64_t b = 0; b < toClasses; ++b) {
        double cost = edge.cost[a][b];
        if (std::isinf(cost))
          continue;
        int col = program.addColumn(cost * kCostScale, /*isInteger=*/false, 1);
        program.set(fromRow[a], col, 1);
        program.set(toRow[b], col, 1);
        if (sharedRow >= 0 && edge.hideable(a, b) != 0)
          program.set(sharedRow, col, -edge.hideable(a, b) * kCostScale);
      }
  }
  if (sharedRow >= 0) {
    // Bounded by what could hide at most (an infinite bound made CBC's dual
    // simplex call a feasible program infeasible).
    double mostShared = problem.sharedCost, mostCover = 0;
    for (const ChoiceEdge &edge : problem.edges) {
      double most = 0;
      for (size_t a = 0; a < edge.cost.size(); ++a)
        for (size_t b = 0; b < edge.cost[a].size(); ++b)
          most = std::max(most, edge.hideable(a, b));
      mostShared += most;
    }
    for (const ChoiceNode &node : problem.nodes)
      if (!node.cover.empty())
        mostCover += *std::max_element(node.cover.begin(), node.cover.end());
    int hidden = program.addColumn(
        -1, /*isInteger=*/false, std::min(mostShared, mostCover) * kCostScale);
    program.set(sharedRow, hidden, 1);
    program.set(coverRow, hidden, 1);
  }

  // Column-wise into CBC's solver interface (Clp for the LPs).
  std::vector<CoinBigIndex> starts{0};
  std::vector<int> indices, lengths;
  std::vector<double> values;
  for (const auto &entries : program.columns) {
    for (auto [row, value] : entries) {
      indices.push_back(row);
      values.push_back(value);
    }
    starts.push_back(static_cast<CoinBigIndex>(indices.size()));
    lengths.push_back(static_cast<int>(entries.size()));
  }
  int numColumns = program.objective.size();
  int numRows = program.rowLower.size();
  CoinPackedMatrix matrix(/*colordered=*/true, numRows, numColumns,
                          static_cast<CoinBigIndex>(values.size()),
                          values.data(), indices.data(), starts.data(),
                          lengths.data());
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, program.lower.data(), program.upper.data(),
                     program.objective.data(), program.rowLower.data(),
                     program.rowUpper.data());
  for (int col = 0; col < numColumns; ++col)
    if (program.integer[col])
      solver.setInteger(col);
  solution.size.binaryVariables = binaries;
  solution.size.continuousVariables = numColumns - binaries;
  solution.size.constraints = numRows;

  // The relaxation first, by Clp's barrier (interior point) without
  // crossover: on the programs of a 2-D mesh it is several times faster
  // than dual simplex, and these relaxations are mostly tight. Each node's
  // largest choice, improved by single moves, that costs no more than the
  // relaxation's optimum (a lower bound on every answer) is optimal, and
  // no branch and cut is needed. Otherwise it is an answer to beat.
  auto started = std::chrono::steady_clock::now();
  std::vector<int64_t> rounded;
  double roundedCost = kForbidden;
  {
    // Presolved first (the barrier on a 1.3B GPT's program on dp=2,tp=4:
    // 18 s presolved, no answer in 120 s without), and the point mapped
    // back without the simplex clean-up that ClpSimplex::initialSolve
    // would run after it (which took 76 s on the 8-layer GPT's program,
    // against 2 s for the barrier): only the point and its objective are
    // wanted.
    ClpSimplex relaxation(*solver.getModelPtr());
    relaxation.setLogLevel(0);
    ClpPresolve presolve;
    ClpSimplex *presolved = presolve.presolvedModel(relaxation, 1e-8,
                                                    /*keepIntegers=*/false);
    int status = -1;
    double objective = 0;
    if (presolved) {
      presolved->setLogLevel(0);
      presolved->setMaximumSeconds(options.timeLimitSeconds);
      presolved->barrier(/*crossover=*/false);
      status = presolved->status();
      objective = presolved->objectiveValue();
      if (status == 0)
        presolve.postsolve(/*updateStatus=*/true);
      delete presolved;
    }
    if (status == 0) {
      double bound = objective / kCostScale + paidConstant;
      const double *x = relaxation.primalColumnSolution();
      std::vector<int64_t> largest(numNodes, 0);
      for (int64_t u = 0; u < numNodes; ++u)
        for (size_t s = 1; s < column[u].size(); ++s)
          if (x[column[u][s]] > x[column[u][largest[u]]])
            largest[u] = s;
      for (std::vector<int64_t> candidate :
           {largest, improveChoices(problem, largest)}) {
        double cost = 0;
        if (fitsProblem(problem, candidate, cost) && cost < roundedCost) {
          rounded = std::move(candidate);
          roundedCost = cost;
        }
      }
      if (meetsBound(roundedCost, bound)) {
        solution.choices = std::move(rounded);
        solution.cost = roundedCost;
        solution.method = ChoiceMethod::Optimal;
        return Outcome::Solved;
      }
    }
  }
  double spent = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - started)
                     .count();

  CbcModel model(solver);
  model.messageHandler()->setLogLevel(0);
  CbcMain0(model);
  // As the cbc command would: the relaxation by dual simplex with presolve
  // first ("-dualS"; on the programs of a 2-D mesh it takes seconds where
  // branch and cut's own first solve takes minutes), then branch and cut.
  // CBC's own preprocessing is off: on a two-node program with a memory row
  // (seed 4072 of the unit test against brute force) it returned a worse
  // answer as proven optimal.
  std::string seconds =
      formatSeconds(secondsLeft(options.timeLimitSeconds, spent));
  const char *argv[] = {"partita", "-log", "0", "-slog", "0", "-seconds",
                        seconds.c_str(), "-preprocess", "off", "-dualS",
                        "-solve",  "-quit"};
  CbcMain1(static_cast<int>(std::size(argv)), argv, model);

  // CBC's solution, if it has one; else (or if its time ran out first and
  // the rounded relaxation's or the heuristic's is cheaper than `toBeat`)
  // the cheaper of those that fits.
  auto takeHeuristic = [&](double toBeat) {
    std::vector<int64_t> fallback = heuristicChoices(problem);
    double cost = 0;
    ChoiceMethod method = ChoiceMethod::Heuristic;
    if (!fitsProblem(problem, fallback, cost) || cost >= roundedCost) {
      fallback = rounded;
      cost = roundedCost;
      method = ChoiceMethod::Rounded;
    }
    if (fallback.empty() || cost >= toBeat)
      return false;
    solution.choices = std::move(fallback);
    solution.cost = cost;
    solution.method = method;
    return true;
  };
  const double *solved = model.bestSolution();
  if (!solved) {
    // (Stopped by its time limit in the relaxation, CBC's solver may say
    // infeasible of a feasible program.)
    if (!model.isSecondsLimitReached() &&
        (model.isProvenInfeasible() ||
         model.solver()->isProvenPrimalInfeasible())) {
      error = problem.memoryLimit > 0 ? "no choices fit the memory limit"
                                      : "no choices avoid the forbidden pairs";
      return Outcome::NoneExists;
    }
    if (!takeHeuristic(kForbidden)) {
      error = "CBC found no solution in its time limit (" +
              formatSeconds(options.timeLimitSeconds) +
              " s), nor did the rounded relaxation or the greedy heuristic";
      return Outcome::GaveUp;
    }
    return Outcome::Solved;
  }
  solution.choices.assign(numNodes, -1);
  for (int64_t u = 0; u < numNodes; ++u) {
    for (size_t s = 0; s < column[u].size(); ++s)
      if (solved[column[u][s]] > 0.5)
        solution.choices[u] = s;
    if (solution.choices[u] < 0) {
      error = "CBC's solution picks no choice for node " + std::to_string(u);
      return Outcome::GaveUp;
    }
  }
  double memory = 0;
  solution.cost = evaluateChoices(problem, solution.choices, &memory);
  if (std::isinf(solution.cost) ||
      (problem.memoryLimit > 0 && memory > problem.memoryLimit * (1 + 1e-9))) {
    error = "CBC's solution breaks a constraint";
    return Outcome::GaveUp;
  }
  solution.method = model.isProvenOptimal() ? ChoiceMethod::Optimal
                                            : ChoiceMethod::TimeLimit;
  if (solution.method == ChoiceMethod::TimeLimit)
    takeHeuristic(solution.cost);
  return Outcome::Solved;
}
/// reduceChoices on `problem` (no shared pairs), CBC on what is left, and
/// the answer expanded to every node.
Outcome solveUnshared(const ChoiceProblem &problem,
                      const ChoiceOptions &options, ChoiceSolution &solution,
                      std::string &error) {
  solution.size = ProgramSize();
  solution.size.programs = 1;
  ReducedProblem reduced = reduceChoices(problem);
  if (std::isinf(reduced.constant)) {
    error = "no choices avoid the forbidden pairs";
    return Outcome::NoneExists;
  }
  ChoiceSolution left;
  Outcome outcome = Outcome::Solved;
  if (!reduced.problem.nodes.empty())
    outcome = solveProgram(reduced.problem, options, left, error);
  // The program's size, with an answer or without.
  solution.size = left.size;
  solution.size.solvedNodes = reduced.problem.nodes.size();
  solution.size.programs = 1;
  if (outcome == Outcome::Solved) {
    solution.choices = reduced.expand(left.choices);
    solution.method = left.method;
  }
  return outcome;
}
} // namespace

namespace {
/// `problem` without its shared resource: the pairs that need it forbidden
/// (`avoid`) or only its flags dropped (paid: its cost left to the caller),
/// and sharedCost 0.
void dropShared(ChoiceProblem &problem, bool avoid) {
  for (ChoiceEdge &edge : problem.edges) {
    if (avoid)
      for (size_t a = 0; a < edge.shared.size(); ++a)
        for (size_t b = 0; b < edge.shared[a].size(); ++b)
          if (edge.shared[a][b])
            edge.cost[a][b] = kForbidden;
    edge.shared.clear();
    edge.sharedSeconds.clear();
  }
  problem.sharedCost = 0;
}

/// solveChoices on a well-formed `problem` whose cover is ignored.
bool solveLinear(const ChoiceProblem &problem, const ChoiceOptions &options,
                 ChoiceSolution &solution, std::string &error) {
  const int64_t numNodes = problem.nodes.size();
  if (options.heuristicOnly) {
    if (problem.memoryLimit > 0)
      return fail(error, "the greedy heuristic does not take a memory limit");
    solution.choices = heuristicChoices(problem);
    solution.cost = evaluateChoices(problem, solution.choices);
    solution.method = ChoiceMethod::Heuristic;
    if (std::isinf(solution.cost))
      return fail(error, "the greedy heuristic found no choices that avoid "
                         "the forbidden pairs");
    return true;
  }

  for (int64_t u = 0; u < numNodes; ++u)
    if (std::all_of(problem.nodes[u].costs.begin(),
                    problem.nodes[u].costs.end(),
                    [](double cost) { return std::isinf(cost); }))
      return fail(error,
                  "every choice of node " + std::to_string(u) + " is forbidden");

  // The shared resource, by cases: paid (its flags dropped, its cost added
  // if the answer uses it) or avoided (the pairs that need it forbidden).
  // Each is a program without it, which reduceChoices can shrink; the
  // cheaper answer wins. When the paid case's answer needs no shared pair,
  // it is the avoided case's optimum too.
  bool anyShared = false;
  for (const ChoiceEdge &edge : problem.edges)
    for (const auto &row : edge.shared)
      anyShared |= std::any_of(row.begin(), row.end(), [](char f) { return f; });
  auto withoutShared = [&](bool avoid) {
    ChoiceProblem cases = problem;
    dropShared(cases, avoid);
    return cases;
  };
  auto usesShared = [&](const std::vector<int64_t> &choices) {
    for (const ChoiceEdge &edge : problem.edges)
      if (edge.needsShared(edge.fromClass[choices[edge.from]],
                           edge.toClass[choices[edge.to]]))
        return true;
    return false;
  };
  auto start = std::chrono::steady_clock::now();
  Outcome paid = solveUnshared(anyShared ? withoutShared(false) : problem,
                               options, solution, error);
  bool found = paid == Outcome::Solved;
  if (found)
    solution.cost = evaluateChoices(problem, solution.choices);
  if (anyShared && problem.sharedCost > 0 &&
      (!found || usesShared(solution.choices))) {
    // In the time the first program left. (Giving CBC the paid answer's
    // cost as a cutoff made it slower: 0.7 to 3.5 s on an 8-layer GPT.)
    std::chrono::duration<double> spent =
        std::chrono::steady_clock::now() - start;
    ChoiceOptions rest = options;
    rest.timeLimitSeconds =
        std::max(options.timeLimitSeconds - spent.count(), 1.0);
    ChoiceSolution avoided;
    std::string avoidedError;
    Outcome second =
        solveUnshared(withoutShared(true), rest, avoided, avoidedError);
    if (second == Outcome::Solved)
      avoided.cost = evaluateChoices(problem, avoided.choices);
    bool takeAvoided =
        second == Outcome::Solved && (!found || avoided.cost < solution.cost);
    if (!found && !takeAvoided)
      return false; // the paid case's error says why
    // Proven optimal only if each case was solved optimally or shown to
    // have nothing (cheaper).
    auto proven = [](Outcome outcome, const ChoiceSolution &answer) {
      return outcome == Outcome::NoneExists ||
             (outcome == Outcome::Solved &&
              answer.method == ChoiceMethod::Optimal);
    };
    bool bothProven = proven(paid, solution) && proven(second, avoided);
    ChoiceSolution chosen = takeAvoided ? avoided : solution;
    const ChoiceSolution &other = takeAvoided ? solution : avoided;
    chosen.size += other.size;
    if (chosen.method == ChoiceMethod::Optimal && !bothProven)
      chosen.method = ChoiceMethod::TimeLimit;
    solution = std::move(chosen);
  } else if (!found) {
    return false;
  }
  double memory = 0;
  solution.cost = evaluateChoices(problem, solution.choices, &memory);
  if (std::isinf(solution.cost) ||
      (problem.memoryLimit > 0 && memory > problem.memoryLimit * (1 + 1e-9)))
    return fail(error, "the solution breaks a constraint");
  return true;
}

/// The paid case of `problem` at weight `weight` in [0, 1]: the shared
/// resource taken as paid (its flags dropped; its cost, `weight` times
/// sharedCost, is left to the caller to add), the hideable part of each
/// shared pair `weight` times as much, each choice `weight` times its cover
/// less, and no cover. For any choices that need the shared resource, this
/// plus weight x sharedCost is (1 - weight) x (their total with every shared
/// pair hidden) + weight x (their total with all the cover hiding), which is
/// at most their total: the weighted optimum bounds theirs from below.
ChoiceProblem weightedPaid(const ChoiceProblem &problem, double weight) {
  ChoiceProblem out = problem;
  for (ChoiceNode &node : out.nodes) {
    for (size_t s = 0; s < node.cover.size(); ++s)
      if (!std::isinf(node.costs[s]))
        node.costs[s] = std::max(0.0, node.costs[s] - weight * node.cover[s]);
    node.cover.clear();
  }
  for (ChoiceEdge &edge : out.edges)
    for (size_t a = 0; a < edge.shared.size(); ++a)
      for (size_t b = 0; b < edge.shared[a].size(); ++b)
        if (edge.shared[a][b] && !std::isinf(edge.cost[a][b]))
          edge.cost[a][b] -= (1 - weight) * edge.hideable(a, b);
  dropShared(out, /*avoid=*/false);
  return out;
}

/// solveChoices on a well-formed `problem` with cover and shared pairs, by
/// cases. Choices that avoid the shared resource hide nothing: one program.
/// Those that pay it: the paid weighted programs at 0 (everything shared
/// hidden) and 1 (all the cover hiding), then at the weight where the lines
/// of the two answers nearest either side meet (a cutting plane on the
/// weighted optima, a concave function of the weight), until the weighted
/// optimum there meets the lines or 8 programs were solved. The best answer
/// is optimal when it costs no more than the smaller of the avoided case's
/// optimum and the paid case's largest weighted optimum.
bool solveCovered(const ChoiceProblem &problem, const ChoiceOptions &options,
                  ChoiceSolution &solution, std::string &error) {
  auto start = std::chrono::steady_clock::now();
  auto spent = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  auto timeLeft = [&] {
    ChoiceOptions left = options;
    left.timeLimitSeconds = secondsLeft(options.timeLimitSeconds, spent());
    return left;
  };
  ChoiceSolution best;
  best.cost = kForbidden;
  ProgramSize size;
  auto consider = [&](ChoiceSolution &answer) {
    size += answer.size;
    double cost = evaluateChoices(problem, answer.choices);
    if (cost < best.cost) {
      best = std::move(answer);
      best.cost = cost;
    }
  };
  // Whether each case's bound holds (its programs solved optimally), and
  // the bounds: the avoided case's optimum (kForbidden when no choices
  // avoid the resource), the paid case's largest weighted optimum.
  bool proven = true;
  double avoidedBound = kForbidden, paidBound = -kForbidden;
  std::string why;

  // (Its cover is left: with no shared pair nothing hides behind it.)
  ChoiceProblem avoiding = problem;
  dropShared(avoiding, /*avoid=*/true);
  ChoiceSolution avoided;
  if (solveLinear(avoiding, options, avoided, why)) {
    if (avoided.method == ChoiceMethod::Optimal)
      avoidedBound = avoided.cost;
    else
      proven = false;
    consider(avoided);
  } else if (why != "no choices avoid the forbidden pairs" &&
             why != "no choices fit the memory limit") {
    proven = false;
  }

  // A paid answer's line: its weighted cost at weight w is at0 + w x slope,
  // with slope = its hideable shared cost (sharedCost too) less its cover.
  struct Line {
    double at0 = 0, slope = 0;
  };
  auto solveAt = [&](double weight, Line &line) {
    ChoiceSolution answer;
    if (!solveLinear(weightedPaid(problem, weight), timeLeft(), answer, why)) {
      proven = false;
      return false;
    }
    double value = answer.cost + weight * problem.sharedCost;
    if (answer.method == ChoiceMethod::Optimal)
      paidBound = std::max(paidBound, value);
    else
      proven = false;
    double shared = 0, cover = 0;
    if (!sharedAndCover(problem, answer.choices, shared, cover))
      shared += problem.sharedCost; // (paid here all the same)
    line.slope = shared - cover;
    line.at0 = value - weight * line.slope;
    consider(answer);
    return true;
  };
  Line low, high;
  if (solveAt(0, low) && low.slope > 0 && solveAt(1, high) &&
      high.slope < 0 && !options.heuristicOnly) {
    for (int program = 2; program < 8 && spent() < options.timeLimitSeconds;
         ++program) {
      // Done once the paid case is shown not to beat the best answer.
      if (proven && paidBound >= best.cost)
        break;
      double weight = (high.at0 - low.at0) / (low.slope - high.slope);
      double top = low.at0 + weight * low.slope;
      Line line;
      if (!solveAt(weight, line))
        break;
      double value = line.at0 + weight * line.slope;
      if (value >= top - 1e-9 * std::abs(top) - 1e-15 || line.slope == 0)
        break; // the weighted optima are highest here
      (line.slope > 0 ? low : high) = line;
    }
  }
  // A gap left: the paid case with its cover in rows, exactly. Every node
  // with cover is tied to them and stays, so only a small program is solved
  // so. (Holding the cover at the best answer's, so that only the nodes on
  // hideable pairs stay, left an 8-layer GPT's program on dp=2,tp=4 to
  // branch and cut for longer than the time limit, with nothing better.)
  auto bound = [&] { return std::min(avoidedBound, paidBound); };
  if (proven && !std::isinf(bound()) && !meetsBound(best.cost, bound()) &&
      !options.heuristicOnly) {
    int64_t columns = 0;
    for (const ChoiceNode &node : problem.nodes)
      columns += node.costs.size();
    for (const ChoiceEdge &edge : problem.edges)
      columns += numClasses(edge.fromClass) * numClasses(edge.toClass);
    ChoiceProblem paid = problem;
    paid.sharedPaid = true;
    ChoiceSolution answer;
    if (columns <= options.exactCoverColumns &&
        solveUnshared(paid, timeLeft(), answer, why) == Outcome::Solved) {
      bool exact = answer.method == ChoiceMethod::Optimal;
      double value = evaluateChoices(paid, answer.choices);
      consider(answer);
      if (exact)
        paidBound = std::max(paidBound, value);
    }
  }
  if (std::isinf(best.cost)) {
    error = why;
    return false;
  }

  // Single moves priced with what the cover hides may still help when the
  // weighting left a gap.
  std::vector<int64_t> moved = improveChoices(problem, best.choices);
  double movedCost = 0;
  if (fitsProblem(problem, moved, movedCost) && movedCost < best.cost) {
    best.choices = std::move(moved);
    best.cost = movedCost;
  }
  evaluateChoices(problem, best.choices, nullptr, &best.hidden);
  best.size = size;
  if (proven && !std::isinf(bound())) {
    bool closed = meetsBound(best.cost, bound());
    best.method = closed ? ChoiceMethod::Optimal : ChoiceMethod::Bounded;
    best.gap = closed ? 0 : best.cost - bound();
  } else if (best.method == ChoiceMethod::Optimal) {
    best.method = ChoiceMethod::TimeLimit;
  }
  solution = std::move(best);
  return true;
}

} // namespace

bool solveChoices(const ChoiceProblem &problem, const ChoiceOptions &options,
                  ChoiceSolution &solution, std::string &error) {
  const int64_t numNodes = problem.nodes.size();
  // Check the shape first: CBC must never see an index out of range.
  for (int64_t u = 0; u < numNodes; ++u) {
    const ChoiceNode &node = problem.nodes[u];
    if (node.costs.empty())
      return fail(error, "node " + std::to_string(u) + " has no choices");
    if (!node.memory.empty() && node.memory.size() != node.costs.size())
      return fail(error, "node " + std::to_string(u) +
                             " has memory for a different number of choices");
    if (!node.cover.empty() && node.cover.size() != node.costs.size())
      return fail(error, "node " + std::to_string(u) +
                             " has cover for a different number of choices");
    for (size_t s = 0; s < node.cover.size(); ++s)
      if (!(node.cover[s] >= 0) ||
          (!std::isinf(node.costs[s]) && node.cover[s] > node.costs[s]))
        return fail(error, "node " + std::to_string(u) +
                               ": a choice's cover must lie between 0 and "
                               "its cost");
  }
  for (size_t i = 0; i < problem.edges.size(); ++i) {
    const ChoiceEdge &edge = problem.edges[i];
    auto bad = [&](const std::string &what) {
      return fail(error, "edge " + std::to_string(i) + ": " + what);
    };
    if (edge.from < 0 || edge.from >= numNodes || edge.to < 0 ||
        edge.to >= numNodes || edge.from == edge.to)
      return bad("node index out of range or a node to itself");
    if (edge.fromClass.size() != problem.nodes[edge.from].costs.size() ||
        edge.toClass.size() != problem.nodes[edge.to].costs.size())
      return bad("a class per choice expected");
    for (int64_t a : edge.fromClass)
      if (a < 0 || a >= static_cast<int64_t>(edge.cost.size()))
        return bad("producer class out of range");
    for (const auto &row : edge.cost)
      for (int64_t b : edge.toClass)
        if (b < 0 || b >= static_cast<int64_t>(row.size()))
          return bad("consumer class out of range");
    if (!edge.shared.empty()) {
      if (edge.shared.size() != edge.cost.size())
        return bad("a shared flag per cost expected");
      for (size_t a = 0; a < edge.cost.size(); ++a)
        if (edge.shared[a].size() != edge.cost[a].size())
          return bad("a shared flag per cost expected");
    }
    if (!edge.sharedSeconds.empty()) {
      if (edge.sharedSeconds.size() != edge.cost.size())
        return bad("shared seconds per cost expected");
      for (size_t a = 0; a < edge.cost.size(); ++a) {
        if (edge.sharedSeconds[a].size() != edge.cost[a].size())
          return bad("shared seconds per cost expected");
        for (size_t b = 0; b < edge.cost[a].size(); ++b) {
          double part = edge.sharedSeconds[a][b];
          if (!(part >= 0) ||
              (!std::isinf(edge.cost[a][b]) && part > edge.cost[a][b]))
            return bad("shared seconds must lie between 0 and the cost");
        }
      }
    }
  }

  bool anyCover = false, anyShared = false;
  for (const ChoiceNode &node : problem.nodes)
    anyCover |= std::any_of(node.cover.begin(), node.cover.end(),
                            [](double c) { return c > 0; });
  for (const ChoiceEdge &edge : problem.edges)
    for (const auto &row : edge.shared)
      anyShared |= std::any_of(row.begin(), row.end(), [](char f) { return f; });
  if (anyCover && anyShared)
    return solveCovered(problem, options, solution, error);
  return solveLinear(problem, options, solution, error);
}

std::vector<int64_t> heuristicChoices(const ChoiceProblem &problem) {
  const size_t numNodes = problem.nodes.size();
  Incidence incident = incidentEdges(problem);
  std::vector<int64_t> choices(numNodes, -1);
  // The cost of node u taking choice s against its neighbours' choices
  // (those still -1 left out).
  auto localCost = [&](size_t u, size_t s) {
    double cost = problem.nodes[u].costs[s];
    for (auto [edge, isFrom] : incident[u]) {
      int64_t other = isFrom ? edge->to : edge->from;
      int64_t theirs = choices[other];
      if (theirs < 0)
        continue;
      cost += isFrom ? edge->cost[edge->fromClass[s]][edge->toClass[theirs]]
                     : edge->cost[edge->fromClass[theirs]][edge->toClass[s]];
    }
    return cost;
  };
  auto best = [&](size_t u) {
    int64_t chosen = 0;
    double least = kForbidden;
    for (size_t s = 0; s < problem.nodes[u].costs.size(); ++s) {
      double cost = localCost(u, s);
      if (cost < least) {
        least = cost;
        chosen = s;
      }
    }
    return chosen;
  };
  // Greedy in node order, then sweeps that move one node at a time to its
  // best choice given the others (iterated conditional modes) until none
  // moves.
  for (size_t u = 0; u < numNodes; ++u)
    choices[u] = best(u);
  std::vector<int64_t> greedy = improveChoices(problem, std::move(choices));
  // Also from every node's first choice; the better of the two.
  std::vector<int64_t> first =
      improveChoices(problem, std::vector<int64_t>(numNodes, 0));
  return evaluateChoices(problem, first) < evaluateChoices(problem, greedy)
             ? first
             : greedy;
}

std::vector<int64_t> improveChoices(const ChoiceProblem &problem,
                                    std::vector<int64_t> choices) {
  const size_t numNodes = problem.nodes.size();
  Incidence incident = incidentEdges(problem);
  auto pairOf = [&](const ChoiceEdge *edge, bool isFrom, size_t s) {
    int64_t theirs = choices[isFrom ? edge->to : edge->from];
    return isFrom ? std::make_pair(edge->fromClass[s], edge->toClass[theirs])
                  : std::make_pair(edge->fromClass[theirs], edge->toClass[s]);
  };
  // Node u's edges when it takes choice s, in one pass: their costs, and
  // what they need of the shared resource (how many pairs, and their
  // hideable costs).
  struct Shared {
    int64_t pairs = 0;
    double seconds = 0;
  };
  struct Edges {
    double cost = 0;
    Shared shared;
  };
  auto edgesAt = [&](size_t u, size_t s) {
    Edges edges;
    for (auto [edge, isFrom] : incident[u]) {
      auto [a, b] = pairOf(edge, isFrom, s);
      edges.cost += edge->cost[a][b];
      if (edge->needsShared(a, b)) {
        ++edges.shared.pairs;
        edges.shared.seconds += edge->hideable(a, b);
      }
    }
    return edges;
  };
  auto coverOf = [&](size_t u, size_t s) {
    const std::vector<double> &cover = problem.nodes[u].cover;
    return cover.empty() ? 0.0 : cover[s];
  };
  // Node u's cost at choice s given the others' totals: a move pays the
  // shared cost only when it makes the first shared pair (and saves it when
  // it ends the last), and what is hidden is min(shared, cover) of all.
  Shared others;
  double othersCover = 0;
  auto localCost = [&](size_t u, size_t s) {
    Edges mine = edgesAt(u, s);
    double cost = problem.nodes[u].costs[s] + mine.cost;
    double shared = others.seconds + mine.shared.seconds;
    if (others.pairs + mine.shared.pairs > 0 || problem.sharedPaid) {
      cost += problem.sharedCost;
      shared += problem.sharedCost;
    }
    if (!std::isinf(cost))
      cost -= std::min(shared, othersCover + coverOf(u, s));
    return cost;
  };
  for (int sweep = 0; sweep < 50; ++sweep) {
    // The totals afresh each sweep, so rounding does not build up.
    Shared total;
    double totalCover = 0;
    for (const ChoiceEdge &edge : problem.edges) {
      int64_t a = edge.fromClass[choices[edge.from]];
      int64_t b = edge.toClass[choices[edge.to]];
      if (edge.needsShared(a, b)) {
        ++total.pairs;
        total.seconds += edge.hideable(a, b);
      }
    }
    for (size_t u = 0; u < numNodes; ++u)
      totalCover += coverOf(u, choices[u]);
    bool moved = false;
    for (size_t u = 0; u < numNodes; ++u) {
      Shared mine = edgesAt(u, choices[u]).shared;
      others = {total.pairs - mine.pairs, total.seconds - mine.seconds};
      othersCover = totalCover - coverOf(u, choices[u]);
      int64_t chosen = choices[u];
      double least = localCost(u, chosen);
      for (size_t s = 0; s < problem.nodes[u].costs.size(); ++s) {
        double cost = localCost(u, s);
        // (A move must gain more than rounding.)
        if (cost < least - 1e-12 * std::abs(least)) {
          least = cost;
          chosen = s;
        }
      }
      if (chosen != choices[u]) {
        choices[u] = chosen;
        Shared now = edgesAt(u, chosen).shared;
        total = {others.pairs + now.pairs, others.seconds + now.seconds};
        totalCover = othersCover + coverOf(u, chosen);
        moved = true;
      }
    }
    if (!moved)
      break;
  }
  return choices;
}

} // namespace partita::autoshard
