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
                            bool withForbidden, bool withShared = false) {
  std::uniform_int_distribution<int> numNodes(2, 6), numChoices(1, 4);
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
  std::bernoulli_distribution hasEdge(0.5);
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
  problem.sharedCost = 7; // now avoiding it (8) is cheaper than 9
  ASSERT_TRUE(solveChoices(problem, {}, solution, error)) << error;
  EXPECT_EQ(solution.cost, 8.0);
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

// Single moves never make an assignment costlier, shared cost included.
TEST(ChoiceILPTest, ImproveNeverCostsMore) {
  for (int seed = 5000; seed < 5200; ++seed) {
    std::mt19937 rng(seed);
    ChoiceProblem problem = randomProblem(rng, /*withMemory=*/false,
                                          /*withForbidden=*/false,
                                          /*withShared=*/true);
    std::vector<int64_t> start;
    for (const ChoiceNode &node : problem.nodes)
      start.push_back(rng() % node.costs.size());
    double before = evaluateChoices(problem, start);
    double after = evaluateChoices(problem, improveChoices(problem, start));
    EXPECT_LE(after, before * (1 + 1e-12)) << "seed " << seed;
  }
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
  EXPECT_EQ(error, "two fixed choices are forbidden together");
  ChoiceProblem noPair;
  noPair.nodes = {{{1.0, 2.0}, {}}, {{1.0, 2.0}, {}}};
  noPair.edges.push_back(
      {0, 1, {0, 1}, {0, 1}, {{kForbidden, kForbidden}, {kForbidden, kForbidden}}});
  EXPECT_FALSE(solveChoices(noPair, {}, solution, error));
  EXPECT_EQ(error, "no choices avoid the forbidden pairs");
  EXPECT_FALSE(solveChoices(noPair, heuristic, solution, error));
  EXPECT_EQ(error, "the greedy heuristic found no choices that avoid the "
                   "forbidden pairs");
}

} // namespace
