//===- ChoiceILPTest.cpp - the choice program against brute force ---------===//
//
// solveChoices must find the cheapest assignment: on random small problems
// (random costs, classes, forbidden pairs and memory limits) its cost equals
// the cheapest that enumerating every assignment finds, and its answer
// keeps every constraint.
//
//===----------------------------------------------------------------------===//

#include "passes/autoshard/ChoiceILP.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace partita::autoshard;

namespace {

/// The cheapest cost over every assignment that fits, or kForbidden.
double bruteForce(const ChoiceProblem &problem) {
  std::vector<int64_t> choices(problem.nodes.size(), 0);
  double best = kForbidden;
  while (true) {
    double memory = 0;
    double cost = evaluateChoices(problem, choices, &memory);
    if (problem.memoryLimit <= 0 || memory <= problem.memoryLimit)
      best = std::min(best, cost);
    size_t u = 0;
    for (; u < choices.size(); ++u) {
      if (++choices[u] < static_cast<int64_t>(problem.nodes[u].costs.size()))
        break;
      choices[u] = 0;
    }
    if (u == choices.size())
      return best;
  }
}

ChoiceProblem randomProblem(std::mt19937 &rng, bool withMemory,
                            bool withForbidden, bool withShared = false,
                            double edgeChance = 0.5, int maxNodes = 6) {
  std::uniform_int_distribution<int> numNodes(2, maxNodes), numChoices(1, 4);
  std::uniform_real_distribution<double> cost(0, 1e-3), mem(0, 1e6);
  std::bernoulli_distribution forbid(withForbidden ? 0.15 : 0.0);
  ChoiceProblem problem;
  int n = numNodes(rng);
  for (int u = 0; u < n; ++u) {
    ChoiceNode node;
    int k = numChoices(rng);
    for (int s = 0; s < k; ++s) {
      node.costs.push_back(forbid(rng) ? kForbidden : cost(rng));
      if (withMemory)
        node.memory.push_back(mem(rng));
    }
    problem.nodes.push_back(std::move(node));
  }
  // Edges from earlier to later nodes (a DAG, as in a function), with
  // classes that group some choices.
  std::bernoulli_distribution hasEdge(edgeChance);
  for (int u = 0; u < n; ++u)
    for (int v = u + 1; v < n; ++v) {
      if (!hasEdge(rng))
        continue;
      ChoiceEdge edge;
      edge.from = u;
      edge.to = v;
      auto classes = [&](size_t count) {
        std::uniform_int_distribution<int64_t> pick(0, count - 1);
        std::vector<int64_t> out;
        int64_t used = 0;
        for (size_t s = 0; s < count; ++s) {
          // Dense class numbers: a new class only right after the last.
          int64_t c = std::min<int64_t>(pick(rng), used);
          used = std::max(used, c + 1);
          out.push_back(c);
        }
        return out;
      };
      edge.fromClass = classes(problem.nodes[u].costs.size());
      edge.toClass = classes(problem.nodes[v].costs.size());
      int64_t a = *std::max_element(edge.fromClass.begin(), edge.fromClass.end()) + 1;
      int64_t b = *std::max_element(edge.toClass.begin(), edge.toClass.end()) + 1;
      edge.cost.assign(a, std::vector<double>(b));
      for (auto &row : edge.cost)
        for (double &c : row)
          c = forbid(rng) ? kForbidden : cost(rng);
      std::bernoulli_distribution share(0.3);
      if (withShared && share(rng)) {
        edge.shared.assign(a, std::vector<char>(b));
        for (auto &row : edge.shared)
          for (char &f : row)
            f = share(rng);
      }
      problem.edges.push_back(std::move(edge));
    }
  if (withShared)
    problem.sharedCost = 2e-3;
  if (withMemory) {
    // Somewhere between the least and the most memory a node could hold.
    double least = 0, most = 0;
    for (const ChoiceNode &node : problem.nodes) {
      least += *std::min_element(node.memory.begin(), node.memory.end());
      most += *std::max_element(node.memory.begin(), node.memory.end());
    }
    problem.memoryLimit = least + (most - least) * 0.4;
  }
  return problem;
}

void expectOptimal(const ChoiceProblem &problem, int seed) {
  double best = bruteForce(problem);
  ChoiceSolution solution;
  std::string error;
  bool solved = solveChoices(problem, {}, solution, error);
  if (std::isinf(best)) {
    EXPECT_FALSE(solved) << "seed " << seed << ": no assignment fits, but "
                         << "the solver returned cost " << solution.cost;
    return;
  }
  ASSERT_TRUE(solved) << "seed " << seed << ": " << error;
  EXPECT_EQ(solution.method, ChoiceMethod::Optimal) << "seed " << seed;
  double memory = 0;
  double cost = evaluateChoices(problem, solution.choices, &memory);
  EXPECT_EQ(cost, solution.cost) << "seed " << seed;
  EXPECT_NEAR(cost, best, 1e-12 + 1e-9 * best) << "seed " << seed;
  if (problem.memoryLimit > 0) {
    EXPECT_LE(memory, problem.memoryLimit * (1 + 1e-9)) << "seed " << seed;
  }
  // The heuristic picks a choice for every node and, where its answer fits
  // the memory limit (which it ignores), never beats the optimum.
  std::vector<int64_t> greedy = heuristicChoices(problem);
  ASSERT_EQ(greedy.size(), problem.nodes.size());
  for (size_t u = 0; u < greedy.size(); ++u)
    ASSERT_TRUE(greedy[u] >= 0 &&
                greedy[u] < static_cast<int64_t>(problem.nodes[u].costs.size()));
  double greedyMemory = 0;
  double greedyCost = evaluateChoices(problem, greedy, &greedyMemory);
  if (problem.memoryLimit <= 0 || greedyMemory <= problem.memoryLimit) {
    EXPECT_GE(greedyCost * (1 + 1e-12) + 1e-15, best) << "seed " << seed;
  }
}

TEST(ChoiceILPTest, MatchesBruteForceOnRandomProblems) {
  for (int seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(seed);
    expectOptimal(randomProblem(rng, /*withMemory=*/false,
                                /*withForbidden=*/false),
                  seed);
  }
}

TEST(ChoiceILPTest, MatchesBruteForceWithMemoryLimits) {
  for (int seed = 1000; seed < 1150; ++seed) {
    std::mt19937 rng(seed);
    expectOptimal(randomProblem(rng, /*withMemory=*/true,
                                /*withForbidden=*/false),
                  seed);
  }
}

TEST(ChoiceILPTest, MatchesBruteForceWithForbiddenPairs) {
  for (int seed = 2000; seed < 2150; ++seed) {
    std::mt19937 rng(seed);
    expectOptimal(randomProblem(rng, /*withMemory=*/true,
                                /*withForbidden=*/true),
                  seed);
  }
}

// A shared cost (one bucket's call) paid once whatever number of pairs need
// it, and not at all when none does.
TEST(ChoiceILPTest, MatchesBruteForceWithASharedCost) {
  for (int seed = 4000; seed < 4150; ++seed) {
    std::mt19937 rng(seed);
    expectOptimal(randomProblem(rng, /*withMemory=*/seed % 2 == 0,
                                /*withForbidden=*/false, /*withShared=*/true),
                  seed);
  }
}

// Sparse graphs, where most nodes have one or two neighbours (and some two
// edges to one neighbour), so reduceChoices takes most of them out.
TEST(ChoiceILPTest, MatchesBruteForceOnSparseProblems) {
  for (int seed = 6000; seed < 6200; ++seed) {
    std::mt19937 rng(seed);
    ChoiceProblem problem = randomProblem(
        rng, /*withMemory=*/seed % 3 == 0, /*withForbidden=*/seed % 2 == 0,
        /*withShared=*/seed % 5 == 0, /*edgeChance=*/0.3, /*maxNodes=*/8);
    // Some edges twice, in both directions.
    size_t numEdges = problem.edges.size();
    for (size_t i = 0; i < numEdges; i += 3) {
      ChoiceEdge twin = problem.edges[i];
      std::swap(twin.from, twin.to);
      std::swap(twin.fromClass, twin.toClass);
      std::vector<std::vector<double>> cost(
          twin.cost.empty() ? 0 : twin.cost[0].size(),
          std::vector<double>(twin.cost.size()));
      for (size_t a = 0; a < twin.cost.size(); ++a)
        for (size_t b = 0; b < twin.cost[a].size(); ++b)
          cost[b][a] = twin.cost[a][b] * 0.5;
      twin.cost = std::move(cost);
      twin.shared.clear();
      problem.edges.push_back(std::move(twin));
    }
    expectOptimal(problem, seed);
  }
}

// The reduced program is exact: for any choices of the nodes left, the
// expanded choices cost the reduced cost plus the constant, and the
// cheapest over the nodes left (plus the constant) is the brute-force
// optimum.
TEST(ChoiceILPTest, ReductionKeepsEveryCost) {
  int takenOut = 0;
  for (int seed = 7000; seed < 7200; ++seed) {
    std::mt19937 rng(seed);
    ChoiceProblem problem =
        randomProblem(rng, /*withMemory=*/false, /*withForbidden=*/seed % 2,
                      /*withShared=*/false, /*edgeChance=*/0.35,
                      /*maxNodes=*/8);
    ReducedProblem reduced = reduceChoices(problem);
    ASSERT_EQ(reduced.kept.size(), problem.nodes.size());
    takenOut += reduced.eliminated.size();
    double best = bruteForce(problem);
    double bestLeft = kForbidden;
    std::vector<int64_t> left(reduced.problem.nodes.size(), 0);
    while (true) {
      std::vector<int64_t> full = reduced.expand(left);
      double cost = evaluateChoices(problem, full);
      double leftCost = evaluateChoices(reduced.problem, left) + reduced.constant;
      if (std::isinf(cost) || std::isinf(leftCost))
        EXPECT_EQ(std::isinf(cost), std::isinf(leftCost)) << "seed " << seed;
      else
        EXPECT_NEAR(cost, leftCost, 1e-12) << "seed " << seed;
      bestLeft = std::min(bestLeft, leftCost);
      size_t u = 0;
      for (; u < left.size(); ++u) {
        if (++left[u] <
            static_cast<int64_t>(reduced.problem.nodes[u].costs.size()))
          break;
        left[u] = 0;
      }
      if (u == left.size())
        break;
    }
    if (std::isinf(best))
      EXPECT_TRUE(std::isinf(bestLeft)) << "seed " << seed;
    else
      EXPECT_NEAR(bestLeft, best, 1e-12) << "seed " << seed;
  }
  // Not a vacuous check: most nodes of these sparse graphs go.
  EXPECT_GT(takenOut, 600);
}

// A chain of 60 nodes (an elementwise chain) is taken out whole: nothing is
// left for CBC, and the answer is the optimum that dynamic programming over
// the chain finds.
TEST(ChoiceILPTest, ChainIsSolvedByReductionAlone) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0, 1);
  ChoiceProblem problem;
  const int n = 60, k = 3;
  for (int u = 0; u < n; ++u) {
    ChoiceNode node;
    for (int s = 0; s < k; ++s)
      node.costs.push_back(cost(rng));
    problem.nodes.push_back(std::move(node));
  }
  for (int u = 0; u + 1 < n; ++u) {
    ChoiceEdge edge{u, u + 1, {0, 1, 2}, {0, 1, 2}, {}, {}};
    edge.cost.assign(k, std::vector<double>(k));
    for (auto &row : edge.cost)
      for (double &c : row)
        c = cost(rng);
    problem.edges.push_back(std::move(edge));
  }
  // Viterbi: the cheapest prefix ending in each choice.
  std::vector<double> prefix = problem.nodes[0].costs;
  for (int u = 1; u < n; ++u) {
    std::vector<double> next(k, kForbidden);
    for (int t = 0; t < k; ++t)
      for (int s = 0; s < k; ++s)
        next[t] = std::min(next[t], prefix[s] + problem.edges[u - 1].cost[s][t] +
                                        problem.nodes[u].costs[t]);
    prefix = next;
  }
  double best = *std::min_element(prefix.begin(), prefix.end());
  ChoiceSolution solution;
  std::string error;
  ASSERT_TRUE(solveChoices(problem, {}, solution, error)) << error;
  EXPECT_EQ(solution.size.solvedNodes, 0);
  EXPECT_EQ(solution.size.binaryVariables, 0);
  EXPECT_EQ(solution.method, ChoiceMethod::Optimal);
  EXPECT_NEAR(solution.cost, best, 1e-9);
}

// A node that holds memory under a limit stays for CBC, whatever its degree.
TEST(ChoiceILPTest, ReductionKeepsNodesThatHoldMemory) {
  ChoiceProblem problem;
  problem.nodes = {{{1.0, 2.0}, {10, 5}}, {{1.0, 1.0}, {}}, {{3.0, 1.0}, {}}};
  problem.edges.push_back({0, 1, {0, 1}, {0, 1}, {{0, 1}, {1, 0}}});
  problem.edges.push_back({1, 2, {0, 1}, {0, 1}, {{0, 1}, {1, 0}}});
  ReducedProblem unlimited = reduceChoices(problem);
  EXPECT_TRUE(unlimited.problem.nodes.empty());
  problem.memoryLimit = 8;
  ReducedProblem limited = reduceChoices(problem);
  ASSERT_EQ(limited.problem.nodes.size(), 1u);
  EXPECT_EQ(limited.kept[0], 0);
  ChoiceSolution solution;
  std::string error;
  ASSERT_TRUE(solveChoices(problem, {}, solution, error)) << error;
  EXPECT_EQ(solution.choices, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(solution.cost, 4.0);
}

TEST(ChoiceILPTest, PaysASharedCostOnce) {
  // Two independent edges whose cheap pairs both need the resource: paying
  // it once (3 + 1 + 1) beats avoiding it on both (2 + 2 ... = 4 + 4).
  ChoiceProblem problem;
  problem.nodes = {{{0, 0}, {}}, {{0, 0}, {}}, {{0, 0}, {}}, {{0, 0}, {}}};
  problem.edges.push_back(
      {0, 1, {0, 1}, {0, 1}, {{1, 4}, {4, 4}}, {{1, 0}, {0, 0}}});
  problem.edges.push_back(
      {2, 3, {0, 1}, {0, 1}, {{1, 4}, {4, 4}}, {{1, 0}, {0, 0}}});
  problem.sharedCost = 3;
  ChoiceSolution solution;
  std::string error;
  ASSERT_TRUE(solveChoices(problem, {}, solution, error)) << error;
  EXPECT_EQ(solution.cost, 5.0);
  // Solved as two programs (paid, avoided): the paid one's answer uses it.
  EXPECT_EQ(solution.size.programs, 2);
  problem.sharedCost = 7; // now avoiding it (8) is cheaper than 9
  ASSERT_TRUE(solveChoices(problem, {}, solution, error)) << error;
  EXPECT_EQ(solution.cost, 8.0);
  EXPECT_EQ(solution.size.programs, 2);
  // When the pairs that need it are dear anyway, the paid program's answer
  // does without it, and no second program is needed.
  for (ChoiceEdge &edge : problem.edges)
    edge.cost[0][0] = 9;
  ASSERT_TRUE(solveChoices(problem, {}, solution, error)) << error;
  EXPECT_EQ(solution.cost, 8.0);
  EXPECT_EQ(solution.size.programs, 1);
  EXPECT_EQ(solution.method, ChoiceMethod::Optimal);
}

// A chain where the cheapest choice of each node alone is not the cheapest
// together: the reshard between them costs more than it saves.
TEST(ChoiceILPTest, PaysForAgreementAcrossAnEdge) {
  ChoiceProblem problem;
  problem.nodes = {{{1.0, 2.0}, {}}, {{2.0, 1.0}, {}}};
  problem.edges.push_back({0, 1, {0, 1}, {0, 1}, {{0, 5}, {5, 0}}});
  ChoiceSolution solution;
  std::string error;
  ASSERT_TRUE(solveChoices(problem, {}, solution, error)) << error;
  EXPECT_EQ(solution.cost, 3.0);
  EXPECT_EQ(solution.choices[0], solution.choices[1]);
}

// On problems without forbidden pairs the heuristic always has an answer,
// and on most of these small ones it is the optimum.
TEST(ChoiceILPTest, HeuristicIsFiniteAndOftenOptimal) {
  int optimal = 0, total = 0;
  for (int seed = 3000; seed < 3200; ++seed) {
    std::mt19937 rng(seed);
    ChoiceProblem problem =
        randomProblem(rng, /*withMemory=*/false, /*withForbidden=*/false);
    double cost = evaluateChoices(problem, heuristicChoices(problem));
    ASSERT_FALSE(std::isinf(cost)) << "seed " << seed;
    double best = bruteForce(problem);
    optimal += cost <= best * (1 + 1e-9) + 1e-15;
    ++total;
  }
  EXPECT_GE(optimal, total / 2) << optimal << " of " << total;
}

/// `problem` with cover on every choice (a random share of its cost, as a
/// backward's share of an op's compute) and, on some shared edges, only a
/// random part of a shared pair's cost hideable (a gather after the
/// reduction is not).
void addCover(std::mt19937 &rng, ChoiceProblem &problem) {
  std::uniform_real_distribution<double> share(0, 1);
  for (ChoiceNode &node : problem.nodes)
    for (double cost : node.costs)
      node.cover.push_back(std::isinf(cost) ? 0 : share(rng) * cost);
  for (ChoiceEdge &edge : problem.edges) {
    if (edge.shared.empty() || rng() % 2)
      continue;
    edge.sharedSeconds = edge.cost;
    for (auto &row : edge.sharedSeconds)
      for (double &part : row)
        part = std::isinf(part) ? 0 : share(rng) * part;
  }
  problem.sharedCost = std::uniform_real_distribution<double>(0, 1e-3)(rng);
}

// Single moves never make an assignment costlier, shared cost and what the
// cover hides included.
TEST(ChoiceILPTest, ImproveNeverCostsMore) {
  for (int seed = 5000; seed < 5400; ++seed) {
    std::mt19937 rng(seed);
    ChoiceProblem problem = randomProblem(rng, /*withMemory=*/false,
                                          /*withForbidden=*/false,
                                          /*withShared=*/true);
    if (seed >= 5200)
      addCover(rng, problem);
    std::vector<int64_t> start;
    for (const ChoiceNode &node : problem.nodes)
      start.push_back(rng() % node.costs.size());
    double before = evaluateChoices(problem, start);
    double after = evaluateChoices(problem, improveChoices(problem, start));
    EXPECT_LE(after, before * (1 + 1e-12)) << "seed " << seed;
  }
}

// The overlap term (what the shared pairs hide behind the cover) ties every
// node together. The weighted programs alone must find the brute-force
// optimum or say how far from a bound they may be, and the bound must hold;
// with the exact program after them (these problems are small), every
// answer is proven optimal.
void expectCoverSolved(bool exact, int &total, int &optimal, int &hidesSome) {
  ChoiceOptions options;
  if (!exact)
    options.exactCoverColumns = 0;
  for (int seed = 8000; seed < 8300; ++seed) {
    std::mt19937 rng(seed);
    ChoiceProblem problem = randomProblem(
        rng, /*withMemory=*/seed % 3 == 0, /*withForbidden=*/seed % 2 == 0,
        /*withShared=*/true, /*edgeChance=*/0.6, /*maxNodes=*/7);
    addCover(rng, problem);
    double best = bruteForce(problem);
    ChoiceSolution solution;
    std::string error;
    bool solved = solveChoices(problem, options, solution, error);
    if (std::isinf(best)) {
      EXPECT_FALSE(solved) << "seed " << seed;
      continue;
    }
    ASSERT_TRUE(solved) << "seed " << seed << ": " << error;
    ++total;
    double memory = 0, hidden = 0;
    double cost = evaluateChoices(problem, solution.choices, &memory, &hidden);
    EXPECT_EQ(cost, solution.cost) << "seed " << seed;
    EXPECT_EQ(hidden, solution.hidden) << "seed " << seed;
    hidesSome += hidden > 0;
    if (problem.memoryLimit > 0) {
      EXPECT_LE(memory, problem.memoryLimit * (1 + 1e-9)) << "seed " << seed;
    }
    EXPECT_GE(cost, best * (1 - 1e-9) - 1e-15) << "seed " << seed;
    if (solution.method == ChoiceMethod::Optimal) {
      ++optimal;
      EXPECT_NEAR(cost, best, 1e-12 + 1e-7 * best) << "seed " << seed;
    } else {
      ASSERT_EQ(solution.method, ChoiceMethod::Bounded) << "seed " << seed;
      EXPECT_GT(solution.gap, 0) << "seed " << seed;
      // The bound is a bound.
      EXPECT_LE(cost - solution.gap, best * (1 + 1e-9) + 1e-15)
          << "seed " << seed;
    }
  }
}

TEST(ChoiceILPTest, CoverMatchesBruteForce) {
  int total = 0, optimal = 0, hidesSome = 0;
  expectCoverSolved(/*exact=*/true, total, optimal, hidesSome);
  EXPECT_EQ(optimal, total);
  // The cases are not all ones where nothing hides.
  EXPECT_GE(hidesSome, total / 4) << hidesSome << " of " << total;
}

TEST(ChoiceILPTest, CoverBoundHoldsWithoutTheExactProgram) {
  int total = 0, optimal = 0, hidesSome = 0;
  expectCoverSolved(/*exact=*/false, total, optimal, hidesSome);
  // Most are proven by the weighting alone; the others (Bounded) are checked
  // against their bound above.
  EXPECT_GE(optimal, total * 4 / 5) << optimal << " of " << total;
  EXPECT_LT(optimal, total) << "no case left a gap: the Bounded path is untested";
}

// What is hidden is min(the chosen shared pairs' hideable costs and the
// shared cost, the chosen choices' cover), worked out by hand.
TEST(ChoiceILPTest, HidesTheLesserOfSharedAndCover) {
  ChoiceProblem problem;
  // Node 0 computes 4 (cover 3 of it); node 1 reads it either way: the
  // shared pair (class 1) costs 5, of which 2 ride the shared call.
  problem.nodes = {{{4.0}, {}, {3.0}}, {{1.0, 1.0}, {}, {0.0, 0.0}}};
  ChoiceEdge edge{0, 1, {0}, {0, 1}, {{0.0, 5.0}}, {{0, 1}}, {{0.0, 2.0}}};
  problem.edges.push_back(edge);
  problem.sharedCost = 0.5;
  double hidden = 0;
  // Pair (0, 1): 4 + 1 + 5 + 0.5 - min(2 + 0.5, 3).
  EXPECT_DOUBLE_EQ(evaluateChoices(problem, {0, 1}, nullptr, &hidden), 8.0);
  EXPECT_DOUBLE_EQ(hidden, 2.5);
  problem.sharedCost = 2;
  // min(2 + 2, 3) = 3.
  EXPECT_DOUBLE_EQ(evaluateChoices(problem, {0, 1}, nullptr, &hidden), 9.0);
  EXPECT_DOUBLE_EQ(hidden, 3.0);
  // Not shared: nothing hides.
  EXPECT_DOUBLE_EQ(evaluateChoices(problem, {0, 0}, nullptr, &hidden), 5.0);
  EXPECT_DOUBLE_EQ(hidden, 0.0);
}

TEST(ChoiceILPTest, ReportsMalformedProblems) {
  ChoiceSolution solution;
  std::string error;
  ChoiceProblem empty;
  empty.nodes.push_back({});
  EXPECT_FALSE(solveChoices(empty, {}, solution, error));
  EXPECT_EQ(error, "node 0 has no choices");

  ChoiceProblem badClass;
  badClass.nodes = {{{1.0}, {}}, {{1.0}, {}}};
  badClass.edges.push_back({0, 1, {0}, {3}, {{0}}});
  EXPECT_FALSE(solveChoices(badClass, {}, solution, error));
  EXPECT_EQ(error, "edge 0: consumer class out of range");

  ChoiceProblem tooBig;
  tooBig.nodes = {{{1.0, 1.0}, {10, 20}}};
  tooBig.memoryLimit = 5;
  EXPECT_FALSE(solveChoices(tooBig, {}, solution, error));
  EXPECT_EQ(error, "no choices fit the memory limit");
  ChoiceOptions heuristic;
  heuristic.heuristicOnly = true;
  EXPECT_FALSE(solveChoices(tooBig, heuristic, solution, error));
  EXPECT_EQ(error, "the greedy heuristic does not take a memory limit");

  // Two fixed choices whose pair is forbidden, and two nodes whose every
  // pair is.
  ChoiceProblem fixedPair;
  fixedPair.nodes = {{{1.0}, {}}, {{1.0}, {}}};
  fixedPair.edges.push_back({0, 1, {0}, {0}, {{kForbidden}}});
  EXPECT_FALSE(solveChoices(fixedPair, {}, solution, error));
  EXPECT_EQ(error, "no choices avoid the forbidden pairs");
  ChoiceProblem noPair;
  noPair.nodes = {{{1.0, 2.0}, {}}, {{1.0, 2.0}, {}}};
  noPair.edges.push_back(
      {0, 1, {0, 1}, {0, 1}, {{kForbidden, kForbidden}, {kForbidden, kForbidden}}});
  EXPECT_FALSE(solveChoices(noPair, {}, solution, error));
  EXPECT_EQ(error, "no choices avoid the forbidden pairs");
  EXPECT_FALSE(solveChoices(noPair, heuristic, solution, error));
  EXPECT_EQ(error, "the greedy heuristic found no choices that avoid the "
                   "forbidden pairs");

  // Cover: one per choice, between 0 and the choice's cost.
  ChoiceProblem badCover;
  badCover.nodes = {{{1.0, 2.0}, {}, {0.5}}};
  EXPECT_FALSE(solveChoices(badCover, {}, solution, error));
  EXPECT_EQ(error, "node 0 has cover for a different number of choices");
  badCover.nodes = {{{1.0, 2.0}, {}, {0.5, 3.0}}};
  EXPECT_FALSE(solveChoices(badCover, {}, solution, error));
  EXPECT_EQ(error, "node 0: a choice's cover must lie between 0 and its cost");
  // A shared pair's hideable part: between 0 and its cost.
  ChoiceProblem badShared;
  badShared.nodes = {{{1.0}, {}}, {{1.0}, {}}};
  badShared.edges.push_back({0, 1, {0}, {0}, {{1.0}}, {{1}}, {{2.0}}});
  EXPECT_FALSE(solveChoices(badShared, {}, solution, error));
  EXPECT_EQ(error, "edge 0: shared seconds must lie between 0 and the cost");
  badShared.edges[0].sharedSeconds = {{1.0, 0.0}};
  EXPECT_FALSE(solveChoices(badShared, {}, solution, error));
  EXPECT_EQ(error, "edge 0: shared seconds per cost expected");
}

} // namespace
